"""Megatron-LM of 2021 (@90e0a0dd): blocking pipeline transfers, a separate gradient-accumulation kernel and no
sharded optimizer; the closed form against the event simulation, which times the same plans its own way."""

from __future__ import annotations

from dataclasses import replace

import pytest

from plait.cost.grad_accumulate import accumulate_s
from plait.engine.capability import first_unsupported
from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.plan.columns import PlanColumns
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.validate.datasets import dataset_path
from plait.validate.runs import read_runs
from plait.validate.translate import candidate_plans
from plait.workload.catalog import get_model

MODEL = get_model("megatron-gpt-39.1b")
CLUSTER = get_cluster("dgx-a100-ib")
ENGINE = get_engine("megatron-lm@2021")


def _plan(pp: int, vpp: int, m: int) -> Plan:
    return Plan(
        tp=8,
        pp=pp,
        vpp=vpp,
        schedule="interleaved" if vpp > 1 else "1f1b",
        dp_replicate=1,
        micro_batch=1,
        global_batch=m,
        recompute="full",
    )


@pytest.mark.parametrize(("pp", "vpp", "m"), [(2, 4, 8), (4, 2, 8), (4, 3, 4), (2, 1, 8)])
def test_the_closed_form_of_blocking_hops_agrees_with_the_simulation(pp: int, vpp: int, m: int) -> None:
    """The simulation charges each blocking hop inside its chunk (the rank waits on it); the closed form counts
    2 m v hops beside the bubble of the compute alone: within 1% of each other."""
    closed = estimate(MODEL, CLUSTER, _plan(pp, vpp, m), engine=ENGINE, simulate=False)
    simulated = estimate(MODEL, CLUSTER, _plan(pp, vpp, m), engine=ENGINE, simulate=True)
    assert closed.time.pp_p2p_s > 0
    assert simulated.step_time_s == pytest.approx(closed.step_time_s, rel=0.01)


def test_blocking_hops_cost_the_interleaved_schedule_its_steady_state_transfers() -> None:
    """Today's engines hide the interleaved steady state's transfers; 2021's pays every chunk's, each with the
    scatter/gather all-gather: the simulated step grows by more than the 2 m v bare sends it adds."""
    plan = _plan(4, 2, 8)
    hidden = replace(ENGINE, framework=replace(ENGINE.framework, p2p_blocking=False))
    blocking = estimate(MODEL, CLUSTER, plan, engine=ENGINE, simulate=True)
    overlapped = estimate(MODEL, CLUSTER, plan, engine=hidden, simulate=True)
    send = overlapped.time.pp_p2p_s / (2 * (plan.pp * plan.vpp - 1))  # one bare send: the overlapped hop count
    extra = blocking.step_time_s - overlapped.step_time_s
    assert extra > 2 * plan.num_micro_batches * plan.vpp * send - overlapped.time.pp_p2p_s


def test_megatron_2021_runs_no_sharded_optimizer() -> None:
    plan = Plan(tp=8, dp_shard=8, sharding="zero1", global_batch=64)
    refusal = first_unsupported(plan, MODEL, ENGINE)
    assert refusal and refusal.startswith("sharding='zero1' is not supported by megatron-lm@2021")
    row = next(r for r in read_runs(dataset_path("dev")) if r.id == "narayanan21_text_gpt3_1024")  # sharding unstated
    assert {p.sharding for p in candidate_plans(row, ENGINE)} == {"none"}


def test_the_accumulation_pass_moves_ten_bytes_per_weight_into_fp32() -> None:
    """One 16-bit gradient read, the fp32 buffer read and written: 1e9 weights move 10 GB, at the A100 80GB's
    streaming rate (2.039 TB/s x 0.83, hardware/data/efficiency.toml) 5.909 ms."""
    cols = PlanColumns.one(Plan(grad_reduce_dtype="fp32", global_batch=8))
    assert accumulate_s(CLUSTER, cols, 1e9, 4) == pytest.approx(5.909e-3, rel=1e-3)
    assert accumulate_s(CLUSTER, cols, 1e9, 2) == pytest.approx(3.545e-3, rel=1e-3)  # into a 16-bit .grad


def test_the_accumulation_pass_is_paid_with_every_micro_batch() -> None:
    fused = replace(ENGINE, framework=replace(ENGINE.framework, grad_accumulate_pass=False))

    def extra(m: int) -> float:
        plan = _plan(4, 1, m)
        return (
            estimate(MODEL, CLUSTER, plan, engine=ENGINE).step_time_s
            - estimate(MODEL, CLUSTER, plan, engine=fused).step_time_s
        )

    # part of each micro-batch's stage time: m of them in the steady state and p - 1 in the fill and drain
    assert extra(8) / extra(4) == pytest.approx((8 + 3) / (4 + 3), rel=0.02) and extra(4) > 0
