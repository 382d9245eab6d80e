"""Recommendation models: the bytes each rank moves under TorchRec's sharding types, by hand; the greedy
placement; plait's placements as TorchRec sharding plans."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.workloads.dlrm.cost import Placement, estimate_dlrm, rank_loads
from plait.workloads.dlrm.model import DlrmSpec, Table, read_dlrm
from plait.workloads.dlrm.search import plan_tables
from tests.inprocess import cli as _cli

ROOT = Path(__file__).resolve().parents[1]
ONE = DlrmSpec("one", 13, (16, 4), (8, 1), (Table("t", rows=100, dim=4, pooling=2.0),))


def test_table_wise_bytes_by_hand() -> None:
    """100 x 4 fp32 rows, 2 ids per sample, 3 samples per rank, 2 ranks, on rank 0. Its 12 ids each read a row
    (16 B) and, fused with row-wise AdaGrad, read and write it (32 B), a 4-element row costing a 32-element one
    at the kernel's quarter-block penalty 1.75 (48 B x 8 x 1.75 = 672 B), and read and write its 4-byte state
    (8 B); the 6 pooled outputs are written and their gradients read (2 x 16 B each): 12 x 680 + 6 x 32 B. It
    sends rank 1's 3 pooled rows (48 B) and gets their gradients back; rank 1 sends its 6 ids (48 B) and 3 int32
    lengths (12 B), after 3 int64 split sizes (24 B) each way."""
    owner, other = rank_loads(ONE, [Placement("t", "table_wise", (0,))], group=2, replicas=1, batch=3, node=2)
    assert owner.lookup_bytes == 12 * 680 + 6 * 32 and other.lookup_bytes == 0
    assert (owner.pooled_out, other.pooled_in, other.index_out, owner.index_in) == (48, 48, 60, 60)
    assert owner.header_bytes == other.header_bytes == 24
    assert owner.a2a_bytes == other.a2a_bytes == 2 * 48 + 60 + 24
    assert (owner.table_bytes, owner.state_bytes, other.table_bytes) == (1600, 400, 0)


def test_row_wise_bytes_by_hand() -> None:
    """Row-wise over 2 ranks: each looks up half of the 12 ids (6 x 680 B, above) for all 6 samples' partial
    sums (6 x 32 B), reduce-scatters the other rank's 3 partial sums (48 B each way) and sends the other rank the
    half of its 6 ids in that rank's rows (24 B) with the 3 samples' bucketized lengths (12 B)."""
    loads = rank_loads(ONE, [Placement("t", "row_wise", (0, 1))], group=2, replicas=1, batch=3, node=2)
    for load in loads:
        assert load.lookup_bytes == 6 * 680 + 6 * 32
        assert (load.pooled_out, load.pooled_in, load.index_out, load.index_in) == (48, 48, 36, 36)
        assert (load.table_bytes, load.state_bytes) == (800, 200)


def test_two_dimensional_replicas_average_the_held_table() -> None:
    """2D sparse parallelism (000-09) as TorchRec's DMPCollection syncs it: 4 ranks in 2 groups of 2; the
    table-wise owner all-reduces its whole table (100 rows x 16 B) and the rows' 4-byte AdaGrad states, the other
    rank nothing."""
    owner, other = rank_loads(ONE, [Placement("t", "table_wise", (0,))], group=2, replicas=2, batch=3, node=2)
    assert (owner.replica_reduce_bytes, other.replica_reduce_bytes) == (100 * 16 + 100 * 4, 0)


@pytest.mark.parametrize("placement, rule", [
    (Placement("t", "table_wise", (0, 1)), "table_wise takes one rank"),
    (Placement("t", "column_wise", (0, 1, 1)), "column_wise over 3 ranks must divide dim=4"),
    (Placement("t", "row_wise", (0,)), "row_wise spreads rows over all 2 ranks"),
    (Placement("t", "sideways", (0,)), "must be one of table_wise"),
    (Placement("t", "table_wise", (5,)), "must be ranks of the group 0..1"),
])
def test_bad_placements_are_one_line(placement: Placement, rule: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(rule)) as caught:
        rank_loads(ONE, [placement], group=2, replicas=1, batch=3, node=2)
    assert "\n" not in str(caught.value)


def test_the_greedy_placement_covers_every_table_and_fits() -> None:
    spec, cluster = read_dlrm(ROOT / "examples" / "dlrm-small.toml"), get_cluster("dgx-a100-ib")
    placed = plan_tables(spec, cluster, 16, 4096)
    assert sorted(p.table for p in placed) == sorted(t.name for t in spec.tables)
    est = estimate_dlrm(spec, placed, cluster, 16, 4096)
    assert est.max_memory_bytes <= 0.95 * cluster.accelerator.memory_bytes
    one_rank = estimate_dlrm(spec, [Placement(t.name, "table_wise", (0,)) for t in spec.tables], cluster, 16, 4096)
    assert est.step_s < one_rank.step_s  # spreading beats piling every table on one rank


def test_plait_places_many_small_tables_no_slower_than_torchrecs_planner() -> None:
    """26 tables of 10^3..10^6 rows on 8 A100s (benchmarks/torchrec_planner.py's many-small set), where the greedy
    passes alone lost to TorchRec's all-table-wise placement by plait's own model (0.800 vs 0.769 ms): the local
    search after them must not lose, and every plan it returns fits."""
    pytest.importorskip("torchrec")
    from plait.workloads.dlrm.torchrec import torchrec_placements

    tables = tuple(Table(f"s{i}", int(10 ** (3 + 3 * i / 25)), 64, float(1 + i % 5)) for i in range(26))
    spec, cluster = DlrmSpec("many-small", 13, (512, 256, 64), (512, 256, 1), tables), get_cluster("dgx-a100-ib")
    ours = estimate_dlrm(spec, plan_tables(spec, cluster, 8, 4096), cluster, 8, 4096)
    placed, _ = torchrec_placements(spec, 8, 8, 4096, cluster.accelerator.memory_bytes)
    theirs = estimate_dlrm(spec, placed, cluster, 8, 4096)
    assert ours.step_s <= theirs.step_s
    assert ours.max_memory_bytes <= 0.95 * cluster.accelerator.memory_bytes


def test_a_table_too_large_for_any_placement_is_refused_in_one_line() -> None:
    huge = DlrmSpec("huge", 13, (16, 4), (8, 1), (Table("t", rows=10**11, dim=4, pooling=1.0),))
    with pytest.raises(ConfigError, match="fits no placement") as caught:
        plan_tables(huge, get_cluster("dgx-a100-ib"), 8, 1024)
    assert "\n" not in str(caught.value)


def test_plait_placements_are_torchrec_sharding_plans() -> None:
    """TorchRec builds its own ShardingPlan from each placement (construct_module_sharding_plan checks ranks and
    shapes), with the sharding types and ranks plait chose."""
    pytest.importorskip("torchrec")
    from plait.workloads.dlrm.torchrec import sharding_plan

    spec = read_dlrm(ROOT / "examples" / "dlrm-small.toml")
    placed = [Placement("t0", "row_wise", tuple(range(16))), Placement("t1", "column_wise", (2, 3)),
              Placement("t2", "table_row_wise", tuple(range(8, 16))), Placement("t3", "data_parallel", tuple(range(16))),
              *(Placement(f"t{i}", "table_wise", (i,)) for i in range(4, 8))]
    plan = sharding_plan(spec, placed, world=16, local_world=8).plan[""]
    for place in placed:
        assert plan[place.table].sharding_type == place.sharding
        if place.sharding in ("table_wise", "column_wise", "table_row_wise"):
            assert tuple(plan[place.table].ranks) == place.ranks


def test_plait_estimate_places_a_dlrm_and_balances_its_ranks() -> None:
    """The planner's placement of examples/dlrm-small.toml on 16 A100s: every table placed once, each rank's time
    the sum of its parts, the step the slowest rank plus the dense MLPs; a given placement is costed as given."""
    import json

    code, out, _ = _cli(["estimate", "--model", str(ROOT / "examples" / "dlrm-small.toml"), "--cluster", "dgx-a100-ib",
                         "--gpus", "16", "--global-batch", "65536", "--json"])
    assert code == 0
    got = json.loads(out)
    assert sorted(p["table"] for p in got["placements"]) == [f"t{i}" for i in range(8)]
    assert got["samples_per_rank"] == 4096 and len(got["ranks"]) == 16
    for rank in got["ranks"]:
        assert rank["time_s"] == pytest.approx(rank["lookup_s"] + rank["all_to_all_s"] + rank["reduce_s"])
    assert got["step_time_s"] == pytest.approx(max(r["time_s"] for r in got["ranks"]) + got["dense_s"])
    given = "t0=row_wise," + ",".join(f"t{i}=table_wise@{i}" for i in range(1, 8))
    code, out, _ = _cli(["estimate", "--model", str(ROOT / "examples" / "dlrm-small.toml"), "--gpus", "16",
                         "--global-batch", "65536", "--placements", given, "--json"])
    assert code == 0 and json.loads(out)["chosen_by"] == "given"
    assert json.loads(out)["ranks"][9]["tables"] == ["t0"]  # rank 9 holds only its row-wise share


@pytest.mark.parametrize("extra, rule", [
    (["--placements", "t0=row_wise"], "placements must name every table once"),
    (["--placements", "t9=row_wise"], "not one of t0, t1"),
    (["--placements", "t0=table_wise@x"], "ranks must be whole numbers"),
    (["--global-batch", "100"], "global_batch=100 must be a positive multiple of gpus=16"),
])
def test_bad_dlrm_options_are_one_line(extra: list[str], rule: str) -> None:
    code, _, err = _cli(["estimate", "--model", str(ROOT / "examples" / "dlrm-small.toml"), "--gpus", "16",
                         "--global-batch", "65536", *extra])
    assert code == 2 and rule in err and len(err.strip().splitlines()) == 1


def test_plait_plan_puts_torchrec_beside_and_exports_its_sharding_plan(tmp_path: Path) -> None:
    """`plait plan` on a DLRM: TorchRec's planner's placement costed by the same model, and plait's placement
    written as TorchRec's ShardingPlan (read back: same sharding types and ranks) and as --placements text that
    plait estimate reads back to the same step; a second export refuses to overwrite."""
    pytest.importorskip("torchrec")
    import json

    model = str(ROOT / "examples" / "dlrm-small.toml")
    args = ["plan", "--model", model, "--cluster", "dgx-a100-ib", "--gpus", "16", "--global-batch", "65536"]
    code, out, _ = _cli([*args, "--export", str(tmp_path), "--json"])
    assert code == 0
    got = json.loads(out)
    assert got["torchrec"]["chosen_by"] == "torchrec" and len(got["torchrec_own_estimate_per_rank"]) == 16
    plan = json.loads((tmp_path / "torchrec_plan.json").read_text())[""]
    for p in got["plait"]["placements"]:
        assert plan[p["table"]]["sharding_type"] == p["sharding"]
        if p["sharding"] in ("table_wise", "column_wise"):
            assert plan[p["table"]]["ranks"] == p["ranks"]
    text = (tmp_path / "placements.txt").read_text().strip()
    code, out, _ = _cli(["estimate", "--model", model, "--cluster", "dgx-a100-ib", "--gpus", "16", "--global-batch",
                         "65536", "--placements", text, "--json"])
    assert json.loads(out)["step_time_s"] == got["plait"]["step_time_s"]
    code, _, err = _cli([*args, "--export", str(tmp_path)])
    assert code == 2 and "already exists" in err


def test_plait_run_dry_run_refuses_what_it_cannot_train(tmp_path: Path) -> None:
    """A fractional pooling factor cannot be trained exactly (whole ids per sample); the refusal is one line."""
    pytest.importorskip("torchrec")
    model = tmp_path / "half.toml"
    model.write_text((ROOT / "examples" / "dlrm-tiny.toml").read_text().replace("pooling = 3.0", "pooling = 1.5"))
    code, _, err = _cli(["run", "--model", str(model), "--gpus", "2", "--global-batch", "8", "--dry-run"])
    assert code == 2 and "t2 pooling=1.5 must be a whole number" in err and len(err.strip().splitlines()) == 1
