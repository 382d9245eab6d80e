"""Megatron-LM of 2021: blocking pipeline transfers (megatron/p2p_communication.py @90e0a0dd) and no sharded
optimizer; the closed form against the event simulation, which times the same plans its own way."""

from __future__ import annotations

from dataclasses import replace

import pytest

from plait.engine.capability import first_unsupported
from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
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
