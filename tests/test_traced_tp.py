"""Tensor parallelism of a traced module's Linear pairs (:mod:`plait.workloads.traced.pairs`,
:mod:`plait.workloads.traced.tensor_parallel`): which pairs are found, what tp costs and saves (hand-computed on
``small_mlp``: four blocks of Linear(32, 128), GELU, Linear(128, 32)), alone and beside DDP (``tp x dp``), what is
refused, and what the planner searches. Parity with one process on 2 gloo ranks (tp) and 4 (tp2 x dp2), with the
bytes counted: ``tests/test_traced_run.py``."""

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
from plait.workloads.traced.pairs import find_pairs, trace_units  # noqa: E402
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
    found, why = find_pairs(trace_units(model, ["0", "1"]))
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
    (MLP, 2, {"dp_shard": 2, "sharding": "zero3"}, "runs beside the all-reduce of unsharded replicas only"),
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
    assert "no divisor of 3 GPUs above 1 divides" in search_traced(mlp, cluster, 3, 63, (ALLREDUCE,), engine).tp_note
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


@pytest.mark.parametrize(("name", "shown"), [("small-mlp-tp2-plan.toml", "tp2 dp1 mb2 gb8 bf16 on 2 CPU ranks"),
                                             ("small-mlp-tp2-dp2-plan.toml", "tp2 dp2 mb2 gb8 fp32 on 4 CPU ranks")])
def test_the_example_tp_plans_start_their_ranks(name: str, shown: str) -> None:
    """``examples/small-mlp-tp2-plan.toml`` (tp = 2 alone) and ``small-mlp-tp2-dp2-plan.toml`` (beside 2 DDP
    replicas) are accepted by ``plait run`` (dry run: no ranks)."""
    from pathlib import Path

    from tests.inprocess import cli

    plan = Path(__file__).resolve().parents[1] / "examples" / name
    code, out, err = cli(["run", "--plan", str(plan), "--dry-run"])
    assert code == 0, err
    assert shown in out


def test_tp_by_dp_reduces_each_ranks_shard_over_ranks_tp_apart() -> None:
    """tp8 x dp2 on two 8-GPU nodes: each rank's DDP all-reduces its gradients, by hand the 35,818 parameters less
    7/8 of the four pairs' 8,320 split ones: 35,818 - 4 x 8,320 x 7/8 = 6,698 fp32 values, over the 2 ranks 8 apart (one in each node: the
    InfiniBand tier, not NVLink); one bucket (under 25 MB) ready as the stem's backward ends, so all of it exposed.
    The pairs hand 2 all-reduces of 32 fp32 features per example each per micro-batch to the TP group."""
    from plait.cost.links import collective_s
    from plait.predict.intervals import step_interval_s
    from plait.workloads.traced.cost import collective_bytes_per_step

    work, cluster = trace(MLP, None, None, "float32"), get_cluster("dgx-h100-ib")
    plan = Plan(tp=8, sp=False, dp_replicate=2, micro_batch=4, global_batch=16, precision="fp32", optimizer="adamw")
    shard = 35_818 - 4 * 8_320 * 7 // 8
    assert collective_bytes_per_step(work, plan) == (2 * 4 * 2 * 32 * 4 * 4, 4 * shard)  # 2 micro-batches
    est = estimate_traced(work, cluster, plan, get_engine("plait"), step_interval_s)
    across = float(collective_s(cluster, "all_reduce", 2, 8, 4.0 * shard))
    assert est.time.dp_comm_s == pytest.approx(across)
    assert across > float(collective_s(cluster, "all_reduce", 2, 1, 4.0 * shard))  # NVLink would be faster


def test_tp_by_pp_sends_each_stages_output_to_the_rank_tp_x_dp_apart() -> None:
    """tp8 x pp2 on two 8-GPU nodes: the stages are 8 ranks apart (one per node), so each micro-batch's cut
    activation, 32 fp32 features per example, crosses InfiniBand forward and its gradient back."""
    from plait.cost.links import collective_s
    from plait.predict.intervals import step_interval_s

    work, cluster = trace(MLP, None, None, "float32"), get_cluster("dgx-h100-ib")
    plan = Plan(tp=8, sp=False, pp=2, micro_batch=4, global_batch=16, precision="fp32", optimizer="adamw")
    est = estimate_traced(work, cluster, plan, get_engine("plait"), step_interval_s)
    once = float(collective_s(cluster, "p2p", 2, 8, 32 * 4 * 4.0))
    assert est.time.pp_p2p_s == pytest.approx(2 * 4 * once)  # 4 micro-batches, there and back
    assert once > float(collective_s(cluster, "p2p", 2, 1, 32 * 4 * 4.0))


def test_the_planner_searches_tp_by_pp_by_dp(mlp) -> None:  # type: ignore[no-untyped-def]
    """On 4 GPUs both degrees that divide 128 and 4 are searched, tp = 2 beside 2 DDP replicas or 2 stages."""
    found = search_traced(mlp, get_cluster("dgx-h100-ib"), 4, 64, (ALLREDUCE,), get_engine("plait"))
    assert "tp=2,4 searched over 4 Linear pair(s)" in found.tp_note
    assert {(e.plan.tp, e.plan.pp, e.plan.dp) for e in found.ranked if e.plan.tp > 1} == {(2, 1, 2), (2, 2, 1),
                                                                                           (4, 1, 1)}
