"""Recommendation models (issue 17): the bytes each rank moves under TorchRec's sharding types, by hand; the greedy
placement; plait's placements as TorchRec sharding plans."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from plait.cost.embeddings import Placement, estimate_dlrm, rank_loads
from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.search.embeddings import plan_tables
from plait.workload.dlrm import DlrmSpec, Table, read_dlrm

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


def test_two_dimensional_replicas_reduce_the_touched_rows() -> None:
    """2D sparse parallelism (000-09): 4 ranks in 2 groups of 2; each table-wise owner all-reduces the rows its
    group touched, at most 2 x 3 samples x 2 ids = 12 of the 100 rows (12 x 16 B)."""
    (owner, _) = rank_loads(ONE, [Placement("t", "table_wise", (0,))], group=2, replicas=2, batch=3, node=2)
    assert owner.replica_reduce_bytes == 12 * 16


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


def test_a_table_too_large_for_any_placement_is_refused_in_one_line() -> None:
    huge = DlrmSpec("huge", 13, (16, 4), (8, 1), (Table("t", rows=10**11, dim=4, pooling=1.0),))
    with pytest.raises(ConfigError, match="fits no placement") as caught:
        plan_tables(huge, get_cluster("dgx-a100-ib"), 8, 1024)
    assert "\n" not in str(caught.value)


def test_plait_placements_are_torchrec_sharding_plans() -> None:
    """TorchRec builds its own ShardingPlan from each placement (construct_module_sharding_plan checks ranks and
    shapes), with the sharding types and ranks plait chose."""
    pytest.importorskip("torchrec")
    from plait.export.torchrec import sharding_plan

    spec = read_dlrm(ROOT / "examples" / "dlrm-small.toml")
    placed = [Placement("t0", "row_wise", tuple(range(16))), Placement("t1", "column_wise", (2, 3)),
              Placement("t2", "table_row_wise", tuple(range(8, 16))), Placement("t3", "data_parallel", tuple(range(16))),
              *(Placement(f"t{i}", "table_wise", (i,)) for i in range(4, 8))]
    plan = sharding_plan(spec, placed, world=16, local_world=8).plan[""]
    for place in placed:
        assert plan[place.table].sharding_type == place.sharding
        if place.sharding in ("table_wise", "column_wise", "table_row_wise"):
            assert tuple(plan[place.table].ranks) == place.ranks
