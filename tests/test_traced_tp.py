"""Tensor parallelism of a traced module's Linear pairs (:mod:`plait.workloads.traced.pairs`,
:mod:`plait.workloads.traced.tensor_parallel`): which pairs are found, what tp costs and saves (hand-computed on
``small_mlp``: four blocks of Linear(32, 128), GELU, Linear(128, 32)), what is refused, and what the planner
searches. Parity with one process on 2 gloo ranks: ``tests/test_traced_run.py`` (case ``tp``)."""

from __future__ import annotations

import pytest

from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.plan.plan import Plan
from plait.sync import ALLREDUCE

torch = pytest.importorskip("torch")
nn = torch.nn

from plait.workloads.traced.cost import estimate_traced  # noqa: E402
from plait.workloads.traced.pairs import find_pairs  # noqa: E402
from plait.workloads.traced.search import search_traced  # noqa: E402
from plait.workloads.traced.tensor_parallel import split_unit  # noqa: E402
from plait.workloads.traced.tracing import trace  # noqa: E402

MLP = "plait.workload.zoo:small_mlp"


class _Block(nn.Module):
    """Two Linears joined as ``kind`` says."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind, self.fc1, self.fc2, self.norm = kind, nn.Linear(8, 16), nn.Linear(16, 8), nn.LayerNorm(16)
        self.fc3 = nn.Linear(8, 16)

    def forward(self, x):  # type: ignore[no-untyped-def]
        h = self.fc1(x)
        if self.kind == "swiglu":
            return self.fc2(torch.nn.functional.silu(h) * self.fc3(x))  # fc3: a gate, split like fc1
        if self.kind == "relu":
            h = torch.relu(h).relu()  # a function and a method: both elementwise
        elif self.kind == "norm":
            h = self.norm(h)  # reads the whole hidden row: no split
        elif self.kind == "residual":
            return self.fc2(h) + h.sum()  # h has two users: the split output is needed whole elsewhere
        return self.fc2(h)


@pytest.mark.parametrize(("kind", "pairs"), [("relu", 1), ("swiglu", 1), ("norm", 0), ("residual", 0)])
def test_pairs_follow_the_data_flow_not_the_module_order(kind: str, pairs: int) -> None:
    model = nn.Sequential(_Block(kind), _Block(kind))
    found, why = find_pairs(model, ["0", "1"])
    assert len(found) == 2 * pairs
    if kind == "relu":
        assert found[0] == (1, "0.fc1", "0.fc2", 16, 8 * 16 + 16 + 16 * 8, ())
    elif kind == "swiglu":
        assert found[0] == (1, "0.fc1", "0.fc2", 16, 2 * (8 * 16 + 16) + 16 * 8, ("0.fc3",))
    else:
        assert "elementwise" in why


@pytest.fixture(scope="module")
def mlp():  # type: ignore[no-untyped-def]
    return trace(MLP, None, None, "bfloat16")


def test_small_mlp_has_one_pair_per_block(mlp) -> None:  # type: ignore[no-untyped-def]
    assert [(p.unit, p.first, p.second, p.hidden) for p in mlp.pairs] == [
        (i, f"{i}.fc1", f"{i}.fc2", 128) for i in range(1, 5)]
    # both weights and the first bias split; the pair's output is 32 bf16 features per example
    assert {(p.split_params, p.output_bytes_per_example) for p in mlp.pairs} == {(32 * 128 + 128 + 128 * 32, 64.0)}


def _estimate(work, tp: int, **knobs):  # type: ignore[no-untyped-def]
    plan = Plan(tp=tp, sp=False, micro_batch=64, global_batch=64, precision="bf16", optimizer="adamw", **knobs)
    from plait.predict.intervals import step_interval_s

    return estimate_traced(work, get_cluster("dgx-h100-ib"), plan, get_engine("plait"), step_interval_s)


def test_tp_splits_the_pairs_weights_and_adds_two_all_reduces_per_pair(mlp) -> None:  # type: ignore[no-untyped-def]
    one, two = _estimate(mlp, 1), _estimate(mlp, 2)
    per_param = one.memory.weights_bytes / mlp.total_params()
    assert one.memory.weights_bytes - two.memory.weights_bytes == pytest.approx(4 * 8320 / 2 * per_param)
    assert one.time.tp_comm_s == 0.0 and two.time.tp_comm_s > 0.0
    # recomputation repeats each pair's forward all-reduce: 3 instead of 2 per pair
    redo = _estimate(mlp, 2, recompute="full")
    assert redo.time.tp_comm_s == pytest.approx(1.5 * two.time.tp_comm_s)
    assert two.model_flops_per_step == one.model_flops_per_step  # the job's FLOPs; each rank runs fewer


def test_each_rank_runs_half_of_the_pairs_gemms(mlp) -> None:  # type: ignore[no-untyped-def]
    """A block's forward is two GEMMs of 2 x 32 x 128 FLOPs per example (GELU and the residual add count none);
    its backward twice that; with tp=2 each rank runs half."""
    block = mlp.units[1]
    assert (block.flops(1, False), block.flops(1, True)) == (2 * 2 * 32 * 128, 4 * 2 * 32 * 128)
    half = split_unit(block, 2)
    assert (half.flops(1, False), half.flops(1, True)) == (2 * 32 * 128, 2 * 2 * 32 * 128)
    assert split_unit(mlp.units[0], 2) is mlp.units[0]  # the stem is no pair


@pytest.mark.parametrize(("factory", "tp", "knobs", "message"), [
    (MLP, 3, {}, "tp=3 must divide the split dimension 128 of the Linear pair 1.fc1 -> 1.fc2"),
    (MLP, 2, {"dp_replicate": 2}, "tensor parallelism is costed and run alone so far"),
    (MLP, 2, {"overlap_chunks": 2}, "split one way"),
    ("plait.workload.zoo:small_cnn", 2, {}, "has no Linear pair to split"),
])
def test_tp_the_pairs_do_not_allow_is_refused_in_one_line(factory: str, tp: int, knobs: dict[str, int],
                                                          message: str) -> None:
    work = trace(factory, (3, 16, 16) if "cnn" in factory else None, None, "bfloat16")
    with pytest.raises(ConfigError, match=message):
        _estimate(work, tp, **knobs)


def test_the_planner_searches_tp_where_pairs_exist_and_says_why_not(mlp) -> None:  # type: ignore[no-untyped-def]
    cluster, engine = get_cluster("dgx-h100-ib"), get_engine("plait")
    found = search_traced(mlp, cluster, 2, 64, (ALLREDUCE,), engine)
    assert "tp=2 searched over 4 Linear pair(s)" in found.tp_note
    assert any(e.plan.tp == 2 for e in found.ranked)
    assert "does not divide" in search_traced(mlp, cluster, 3, 63, (ALLREDUCE,), engine).tp_note
    cnn = trace("plait.workload.zoo:small_cnn", (3, 16, 16), None, "bfloat16")
    assert "not searched: no Linear" in search_traced(cnn, cluster, 2, 8, (ALLREDUCE,), engine).tp_note


def test_plait_plan_of_the_mlp_says_tp_was_searched() -> None:
    """The status page's command, in process: the line naming the searched degree, and the JSON key."""
    from tests.inprocess import cli

    code, out, err = cli(["plan", "--model", MLP, "--gpus", "2", "--global-batch", "64"])
    assert code == 0, err
    assert "tensor parallelism: tp=2 searched over 4 Linear pair(s)" in out
    code, out, err = cli(["plan", "--model", MLP, "--gpus", "2", "--global-batch", "64", "--json", "--top", "200"])
    assert code == 0, err
    import json

    found = json.loads(out)
    assert found["tensor_parallelism"].startswith("tensor parallelism: tp=2 searched")
    assert any(plan["plan"]["tp"] == 2 for plan in found["top"])


def test_the_example_tp_plan_starts_two_ranks() -> None:
    """``examples/small-mlp-tp2-plan.toml`` (tp = 2 alone) is accepted by ``plait run`` (dry run: no ranks)."""
    from pathlib import Path

    from tests.inprocess import cli

    plan = Path(__file__).resolve().parents[1] / "examples" / "small-mlp-tp2-plan.toml"
    code, out, err = cli(["run", "--plan", str(plan), "--dry-run"])
    assert code == 0, err
    assert "tp2 dp1 mb2 gb8" in out and "on 2 CPU ranks (gloo)" in out
