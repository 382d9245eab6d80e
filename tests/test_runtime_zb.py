"""ZB-H1 end to end: PyTorch runs it (one stage per rank, backward split into input and weight gradients)
with the single-process losses; plait's simulator costs the per-rank F/B/W order torch builds; the closed form
follows that simulation."""

from __future__ import annotations

from pathlib import Path

import pytest

from plait.cost.batch import evaluate_batch
from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.job import Job
from plait.plan.columns import PlanColumns
from plait.plan.plan import Plan
from plait.simulate.pipeline import PipelineCosts, simulate_pipeline
from plait.simulate.schedules import zb_h1
from plait.simulate.step import simulate_step
from plait.workload.catalog import get_model, resolve_model

ROOT = Path(__file__).parents[1]
MODEL = ROOT / "examples" / "tiny-model.toml"


def torch_order(p: int, m: int) -> dict[int, list[tuple[str, int, int]]]:
    """The compute actions, per rank, that torch's runtime executes for ZB with one stage per rank."""
    from types import SimpleNamespace

    from torch.distributed.pipelining.schedules import ScheduleInterleavedZeroBubble, _ComputationType

    kinds = {_ComputationType.FORWARD: "F", _ComputationType.BACKWARD_INPUT: "B",
             _ComputationType.BACKWARD_WEIGHT: "W", _ComputationType.FULL_BACKWARD: "full"}
    # The constructor only reads these stage attributes (and sets stage_index_to_group_rank).
    stage = SimpleNamespace(submod=None, group_size=p, num_stages=p, group_rank=0, stage_index_to_group_rank=None)
    schedule = ScheduleInterleavedZeroBubble([stage], m)  # type: ignore[list-item]
    return {rank: [(kinds[a.computation_type], a.microbatch_index, 0) for a in actions if a.computation_type in kinds]
            for rank, actions in schedule.pipeline_order_with_comms.items()}


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 4), (3, 5), (4, 2), (8, 16)])
def test_plait_zb_h1_order_is_torchs(p: int, m: int) -> None:
    pytest.importorskip("torch")
    order = torch_order(p, m)
    for rank in range(p):
        assert order[rank] == zb_h1(p, m, rank), rank
        assert [kind for kind, _, _ in order[rank]].count("W") == m  # the backward is split: m B and m W


def test_zb_h1_order_by_hand() -> None:
    """Rank r: p-1-r warm-up forwards, then F B (W), its first r weight gradients deferred to the end."""
    assert zb_h1(2, 3, 0) == [("F", 0, 0), ("F", 1, 0), ("B", 0, 0), ("W", 0, 0), ("F", 2, 0), ("B", 1, 0),
                              ("W", 1, 0), ("B", 2, 0), ("W", 2, 0)]
    assert zb_h1(2, 3, 1) == [("F", 0, 0), ("B", 0, 0), ("F", 1, 0), ("B", 1, 0), ("W", 0, 0), ("F", 2, 0),
                              ("B", 2, 0), ("W", 1, 0), ("W", 2, 0)]


def uniform(p: int, m: int, f: float, b: float, w: float, delta: float = 0.0) -> PipelineCosts:
    return PipelineCosts(p=p, m=m, v=1, schedule="zb-h1", forward_s=[f] * p, backward_s=[b] * p,
                         weight_grad_s=[w] * p, p2p_s=delta, grad_reduce_s=[0.0] * p, param_gather_s=[0.0] * p,
                         buckets=[1] * p, overlap_grad_reduce=True, optimizer_s=[0.0] * p)


@pytest.mark.parametrize("p,m", [(2, 2), (4, 8), (4, 2), (8, 32), (3, 5)])
@pytest.mark.parametrize("f,b,w", [(1.0, 2.0, 1.0), (1.0, 2.0, 0.5), (1.0, 3.0, 1.0), (2.0, 3.0, 1.0)])
def test_uniform_bubble_is_the_closed_form(p: int, m: int, f: float, b: float, w: float) -> None:
    """(p-1)(T_F + max(0, T_B - T_W)) + max(0, p-m) T_W, T_B = b - w the input-gradient pass; with m >= p
    Qi et al. 2023's (p-1)(T_F + T_B - T_W). 1F1B's bubble is (p-1)(f + b)."""
    bubble = simulate_pipeline(uniform(p, m, f, b, w)).step_time_s - m * (f + b)
    assert bubble == pytest.approx((p - 1) * (f + max(0.0, b - 2 * w)) + max(0, p - m) * w)


@pytest.mark.parametrize("p,m,hops", [(4, 8, 12), (4, 4, 10), (8, 32, 28), (2, 1, 2)])
def test_transfers_on_the_critical_path(p: int, m: int, hops: int) -> None:
    """Deferred Ws give slack: after the fill only 2 clip(m-2, 0, p-1) more transfers are exposed."""
    assert hops == 2 * (p - 1) + 2 * min(max(m - 2, 0), p - 1)
    delay = simulate_pipeline(uniform(p, m, 1.0, 2.0, 1.0, 0.01)).step_time_s
    assert delay - simulate_pipeline(uniform(p, m, 1.0, 2.0, 1.0)).step_time_s == pytest.approx(hops * 0.01)


@pytest.mark.parametrize("model,plan", [
    ("llama3-70b", Plan(tp=8, sp=True, pp=4, schedule="zb-h1", dp_shard=4, sharding="zero1", global_batch=64)),
    ("llama3-70b", Plan(tp=8, sp=True, pp=8, schedule="zb-h1", dp_shard=2, sharding="zero1", global_batch=64)),
    ("llama3-70b", Plan(tp=4, sp=True, pp=8, schedule="zb-h1", dp_shard=4, sharding="zero1", global_batch=256,
                        recompute="full")),
    ("llama3-8b", Plan(pp=2, schedule="zb-h1", dp_shard=8, sharding="zero1", global_batch=64)),
])
def test_closed_form_follows_the_simulation(model: str, plan: Plan) -> None:
    job = Job.build(get_model(model), get_cluster("dgx-h100-ib"), plan, get_engine("plait"))
    closed = float(evaluate_batch(job.model, job.cluster, PlanColumns.from_plans([job.plan]), job.framework)
                   .step_time_s[0])
    assert closed == pytest.approx(simulate_step(job).step_time_s, rel=0.01)


def test_micro_batches_torch_cannot_schedule_are_refused_before_launch() -> None:
    pytest.importorskip("torch")
    from plait.run.support import check_runnable

    plan = Plan(pp=2, schedule="zb-h1", micro_batch=1, global_batch=5)  # 5 micro-batches in rounds of 2
    with pytest.raises(ConfigError, match="schedule='zb-h1' with 5 micro-batches on pp=2 is not supported by plait@0.1: PyTorch's ScheduleInterleavedZeroBubble"):
        check_runnable(plan, resolve_model(str(MODEL)), on_gpu=False)


@pytest.mark.slow
def test_zb_h1_pp2_matches_single_process(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from tests.test_runtime import STEPS, losses, write_plan

    reference = losses(1, write_plan(tmp_path / "one.toml", ""), tmp_path / "one.jsonl")
    got = losses(2, write_plan(tmp_path / "zb.toml", 'pp = 2\nschedule = "zb-h1"'), tmp_path / "zb.jsonl")
    assert len(got) == STEPS
    assert got == pytest.approx(reference, rel=1e-5)
    assert got[-1] < got[0]
