"""Recommendation-model variants: the concatenation interaction, multi-hot (sum or mean) pooling, tables of mixed
widths and Wide & Deep. Their widths, FLOPs and bytes by hand; their refusals in one line; their plans; and their
runs on TorchRec (2 gloo ranks) equal to one process, with every embedding byte sent equal to the prediction."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plait.errors import ConfigError
from plait.workloads.dlrm.cost import Placement, rank_loads
from plait.workloads.dlrm.model import DlrmSpec, Table, check_dlrm, read_dlrm
from plait.workloads.dlrm.predict import parse_placements
from tests.inprocess import cli
from tests.ranks import run_ranks

ROOT = Path(__file__).resolve().parents[1]
CAT = ROOT / "examples" / "dlrm-cat.toml"
WIDE = ROOT / "examples" / "wide-deep-tiny.toml"
MIXED = DlrmSpec("mixed", 4, (16, 8), (16, 1), (Table("t", rows=10, dim=8), Table("u", rows=10, dim=4)),
                 interaction="cat")


def test_cat_and_dot_widths_and_flops_by_hand() -> None:
    """DLRM's reference code (dlrm_s_pytorch.py): ``cat`` feeds the top MLP the bottom MLP's 8 outputs and the
    tables' 8 + 4 widths, 20; ``dot`` (two 8-wide tables) the 8 outputs and the 3 pairwise products of 3
    vectors, 11. Forward FLOPs, 2 per multiply-add: bottom 2 (4 x 16 + 16 x 8) = 384; top 2 (20 x 16 + 16) = 672
    for cat (concatenation is free); 2 (11 x 16 + 16) = 384 plus the 3 x 3 Gram matrix of 8-wide vectors,
    2 x 9 x 8 = 144, for dot."""
    assert MIXED.interaction_width() == 20 and MIXED.mlp_flops_per_sample() == 384 + 672
    dot = DlrmSpec("dot", 4, (16, 8), (16, 1), (Table("t", rows=10, dim=8), Table("u", rows=10, dim=8)))
    assert dot.interaction_width() == 11 and dot.mlp_flops_per_sample() == 384 + 384 + 144


def test_dot_width_is_torchrecs_own() -> None:
    """TorchRec's DLRM sizes its over arch itself (``embedding_dim + choose(F, 2) + F``): plait's dot width is it."""
    pytest.importorskip("torchrec")
    from plait.workloads.dlrm.worker import build

    spec = read_dlrm(ROOT / "examples" / "dlrm-tiny.toml")
    assert build(spec, "cpu").model.over_arch.model[0]._mlp[0]._linear.in_features == spec.interaction_width()


def test_wide_deep_parameters_equal_the_built_models() -> None:
    """Wide & Deep without a bottom MLP: the deep MLP takes the 4 dense features and the 8 + 4 embedding widths
    (16) through 32 and 16 units to the logit, 16 x 32 + 32 + 32 x 16 + 16 + 16 + 1 = 1,089 dense parameters,
    as many as the model built on TorchRec's parts holds beside its embedding tables."""
    spec = read_dlrm(WIDE)
    assert spec.interaction_width() == 16 and spec.mlp_params() == 1089
    pytest.importorskip("torchrec")
    from plait.workloads.dlrm.worker import build

    model = build(spec, "cpu")
    dense = sum(p.numel() for name, p in model.named_parameters() if "embedding_bag_collection" not in name)
    assert dense == 1089


def test_mixed_widths_and_multi_hot_bytes_by_hand() -> None:
    """Table t (4 wide, 3 ids per sample) on rank 0, u (12 wide, 1 id) on rank 1, 2 samples per rank. Pooled
    rows travel at their own width whatever the ids: rank 0 sends rank 1's 2 rows of t (2 x 4 x 4 B = 32 B),
    rank 1 sends rank 0's 2 rows of u (2 x 12 x 4 B = 96 B). Ids travel per id: rank 1 sends rank 0 its 6 ids of
    t (48 B) and 2 int32 lengths (8 B), rank 0 sends rank 1 2 ids of u (16 B) and 2 lengths, after a 24-byte
    header each way. Rank 0 looks up 4 samples x 3 ids = 12 rows of t, each priced as a 32-wide row (the quarter
    block, 1.75): 3 x 32 x 4 B x 1.75 + 8 B of AdaGrad state = 680 B, and writes and reads back 4 pooled 16-byte
    rows; rank 1's 4 rows of u cost the same 680 B each (12 wide: a 32-wide row too) and its pooled rows 48 B."""
    spec = DlrmSpec("mw", 4, (16, 8), (16, 1), (Table("t", rows=10, dim=4, pooling=3.0),
                                                Table("u", rows=10, dim=12)), interaction="cat")
    r0, r1 = rank_loads(spec, [Placement("t", "table_wise", (0,)), Placement("u", "table_wise", (1,))], group=2,
                        replicas=1, batch=2, node=2)
    assert (r0.pooled_out, r0.pooled_in, r1.pooled_out, r1.pooled_in) == (32, 96, 96, 32)
    assert (r1.index_out, r0.index_out, r0.header_bytes) == (48 + 8, 16 + 8, 24)
    assert r0.lookup_bytes == 12 * 680 + 2 * 4 * 16
    assert r1.lookup_bytes == pytest.approx(4 * 680 + 2 * 4 * 48)  # 32/12 x 12 in floating point


@settings(max_examples=40, deadline=None)
@given(dims=st.lists(st.sampled_from([4, 8, 12, 16, 64]), min_size=1, max_size=5), group=st.integers(2, 4),
       batch=st.integers(1, 8), hot=st.integers(2, 6), data=st.data())
def test_multi_hot_moves_more_ids_but_no_more_pooled_bytes(dims: list[int], group: int, batch: int, hot: int,
                                                             data: st.DataObject) -> None:
    """Any tables of mixed widths under any sharding type: raising one table's ids per sample from 1 to ``hot``
    leaves the pooled all-to-all bytes as they were (rows are pooled before they travel), multiplies the ids each
    rank sends of it by ``hot`` (lengths unchanged), and adds lookups; mean pooling moves what sum does; what the
    ranks send of pooled rows, they receive."""
    tables = tuple(Table(f"t{i}", rows=100, dim=d) for i, d in enumerate(dims))
    spec = DlrmSpec("p", 4, (8,), (4, 1), tables, interaction="cat")
    kinds = st.sampled_from(["table_wise", "row_wise", "column_wise", "data_parallel"])
    placed = []
    for t in tables:
        kind = data.draw(kinds)
        if kind == "column_wise" and t.dim % 8:  # two shards of a multiple of 4 columns, or by rows
            kind = "row_wise"
        ranks = {"table_wise": (data.draw(st.integers(0, group - 1)),), "column_wise": (0, 1)}.get(kind, tuple(range(group)))
        placed.append(Placement(t.name, kind, ranks))
    one = rank_loads(spec, placed, group, 1, batch, group)
    multi = replace(spec, tables=(replace(tables[0], pooling=float(hot)), *tables[1:]))
    many = rank_loads(multi, placed, group, 1, batch, group)
    averaged = replace(spec, tables=tuple(replace(t, pooling_mode="mean") for t in multi.tables))
    assert rank_loads(averaged, placed, group, 1, batch, group) == many
    assert sum(x.pooled_out for x in one) == pytest.approx(sum(x.pooled_in for x in one))
    alone = [rank_loads(replace(x, tables=x.tables[:1]), placed[:1], group, 1, batch, group) for x in (spec, multi)]
    lengths = {"table_wise": group - 1, "column_wise": 2 * group - 2, "row_wise": group * (group - 1),
               "data_parallel": 0}[placed[0].sharding] * batch * 4  # int32 lengths sent of the first table
    ids = [sum(x.index_out for x in loads) - lengths for loads in alone]
    assert ids[1] == pytest.approx(hot * ids[0])
    for a, b in zip(one, many, strict=True):
        assert (a.pooled_out, a.pooled_in) == (pytest.approx(b.pooled_out), pytest.approx(b.pooled_in))
        assert b.lookup_bytes >= a.lookup_bytes


@pytest.mark.parametrize("good, edit, rule", [
    (CAT, lambda s: s.replace('interaction = "cat"\n', ""), 'dim=4 must equal the bottom MLP\'s output 8 with interaction "dot"'),
    (CAT, lambda s: s.replace('interaction = "cat"', 'interaction = "sideways"'), "interaction='sideways' must be one of dot, cat"),
    (CAT, lambda s: s.replace('pooling_mode = "mean"', 'pooling_mode = "max"', 1), "pooling_mode='max' must be one of sum, mean"),
    (CAT, lambda s: s.replace('name = "t1"', 'name = "t1"\npart = "wide"'), 'part="wide" needs architecture="wide_deep" and dim=1'),
    (WIDE, lambda s: s.replace('interaction = "cat"', 'interaction = "dot"'), 'architecture "wide_deep" takes interaction "cat"'),
    (WIDE, lambda s: s.replace('part = "wide"\n', ""), 'at least one part="wide" table'),
    (WIDE, lambda s: s.replace("dim = 1\npooling = 2.0", "dim = 2\npooling = 2.0"), 'needs architecture="wide_deep" and dim=1'),
    (WIDE, lambda s: s.replace("bottom_mlp = []", 'bottom_mlp = []\ninteraction_op = "cat"'), "unknown key 'interaction_op'"),
], ids=["dot-mixed", "interaction", "pooling-mode", "wide-in-dlrm", "dot", "no-wide", "wide-dim", "unknown-key"])
def test_bad_recommendation_files_are_one_line(tmp_path: Path, good: Path, edit, rule: str) -> None:  # type: ignore[no-untyped-def]
    """A broken edit of a good cat or Wide & Deep file: exit 2, one line naming the rule."""
    model = tmp_path / "bad.toml"
    model.write_text(edit(good.read_text()))
    code, _, err = cli(["estimate", "--model", str(model), "--gpus", "2", "--global-batch", "8"])
    assert code == 2 and rule in err and len(err.strip().splitlines()) == 1, err


def test_dot_needs_a_bottom_mlp() -> None:
    spec = DlrmSpec("no-bottom", 8, (), (16, 1), (Table("t", rows=10, dim=8),))
    with pytest.raises(ConfigError, match="bottom_mlp too with interaction"):
        check_dlrm(spec, "x")


@pytest.mark.parametrize("model, placements, rule", [
    (WIDE, "d0=row_wise,d1=table_wise@1,w0=table_wise@0,w1=data_parallel",
     "w0: table_wise shards of 1 columns must be a multiple of 4 wide"),
    (CAT, "t0=row_wise,t1=row_wise,t2=row_wise,t3=column_wise@0+1", "t3: column_wise shards of 6 columns"),
])
def test_shards_too_narrow_for_fbgemm_are_refused(model: Path, placements: str, rule: str) -> None:
    """FBGEMM's fused kernel takes rows of a multiple of 4 elements (TorchRec asserts it when it builds a shard): a
    1-wide wide table cannot be table-wise, a 12-wide table cannot be split in two 6-wide column shards."""
    code, _, err = cli(["estimate", "--model", str(model), "--gpus", "2", "--global-batch", "8", "--placements",
                        placements])
    assert code == 2 and rule in err and len(err.strip().splitlines()) == 1, err


def test_the_planner_places_wide_tables_data_parallel_and_torchrec_agrees() -> None:
    """plait plan on Wide & Deep: every 1-wide table data-parallel (no fused shard takes it), TorchRec's planner
    beside, told the same rule."""
    pytest.importorskip("torchrec")
    code, out, err = cli(["plan", "--model", str(WIDE), "--gpus", "2", "--global-batch", "8", "--json"])
    assert code == 0, err
    got = json.loads(out)
    for who in ("plait", "torchrec"):
        placed = {p["table"]: p["sharding"] for p in got[who]["placements"]}
        assert sorted(placed) == ["d0", "d1", "w0", "w1"]
        assert placed["w0"] == placed["w1"] == "data_parallel"


def test_plait_plans_a_cat_dlrm_that_torchrec_runs_exactly() -> None:
    """plait plan on the cat DLRM, TorchRec's planner beside: its mean-pooled tables t0 and t3 stay off rows (t1 and
    t2 are multi-hot: :func:`plait.workloads.dlrm.cost.rows_ok`), so the run takes the plan as it is."""
    pytest.importorskip("torchrec")
    code, out, err = cli(["plan", "--model", str(CAT), "--gpus", "2", "--global-batch", "8", "--json"])
    assert code == 0, err
    got = json.loads(out)
    assert got["torchrec_unavailable"] is None
    placed = {p["table"]: p["sharding"] for p in got["plait"]["placements"]}
    assert sorted(placed) == ["t0", "t1", "t2", "t3"] and "row_wise" not in placed["t0"] + placed["t3"]
    code, _, err = cli(["run", "--model", str(CAT), "--gpus", "2", "--global-batch", "8", "--dry-run"])
    assert code == 0, err


def test_a_row_wise_mean_table_beside_multi_hot_tables_is_refused_before_the_run() -> None:
    """TorchRec's mean-pooling callback for tables sharded by rows divides every table's pooled output by its ids
    (its divisor keeps the lengths of features not sharded by rows): t0 mean by rows beside t1's 3 ids per sample
    table-wise gave losses 1e-3 off one process here; the run refuses it in one line."""
    pytest.importorskip("torchrec")
    code, _, err = cli(["run", "--model", str(CAT), "--gpus", "2", "--global-batch", "8", "--dry-run", "--placements",
                        "t0=row_wise,t1=table_wise@1,t2=table_wise@0,t3=table_wise@0"])
    assert code == 2 and "t0 pooling_mode=mean sharded by rows beside multi-hot table t1" in err, err
    assert len(err.strip().splitlines()) == 1


RUNS = [
    (CAT, "t0=column_wise@0+1,t1=row_wise,t2=table_wise@1,t3=table_wise@0"),  # mean t0 (2 ids) in column shards
    (CAT, "t0=row_wise,t1=row_wise,t2=row_wise,t3=row_wise"),  # mean by rows: TorchRec's callback
    (WIDE, "d0=row_wise,d1=table_wise@1,w0=data_parallel,w1=data_parallel"),
]


@pytest.mark.parametrize("model, placements", RUNS, ids=["cat-mixed", "cat-row-wise-mean", "wide-deep"])
def test_torchrec_trains_the_variant_as_one_process_would_and_sends_the_predicted_bytes(
        tmp_path: Path, model: Path, placements: str) -> None:
    """2 gloo ranks of 4 samples against plain PyTorch SGD on the 8 (as tests/test_dlrm_run.py does for dot)."""
    pytest.importorskip("torchrec")
    from plait.workloads.dlrm.worker import train

    out = tmp_path / "run.json"
    done = run_ranks(2, ["-m", "plait.workloads.dlrm.worker", "--model", str(model), "--placements", placements,
                         "--batch", "4", "--steps", "3", "--out", str(out)], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(out.read_text())
    spec = read_dlrm(model)
    placed = parse_placements(placements, spec, 2)
    single = train(spec, placed, 4, 3, "sgd", reference_ranks=2)
    assert measured["losses"] == pytest.approx(single["losses"], abs=1e-5)
    assert len(set(measured["losses"])) == 3  # the model moves
    for counted, load in zip(measured["bytes"], rank_loads(spec, placed, 2, 1, 4, 2), strict=True):
        assert counted == {"pooled_forward": load.pooled_out, "pooled_backward": load.pooled_in,
                           "inputs": load.index_out, "headers": load.header_bytes}


def test_plait_run_trains_wide_deep_from_its_file() -> None:
    """The README's command, through the CLI and torchrun: placed by plait, the counted bytes printed equal to the
    prediction on every rank."""
    pytest.importorskip("torchrec")
    code, out, err = cli(["run", "--model", str(WIDE), "--gpus", "2", "--global-batch", "8", "--steps", "3"])
    assert code == 0, err
    rows = re.findall(r"rank \d embedding bytes sent.*?│\s+([\d,]+) │\s+([\d,]+) │", out)
    assert len(rows) == 2 and all(measured == predicted for measured, predicted in rows), out
