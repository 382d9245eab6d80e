"""One estimate: a batch of one plan through :func:`plait.cost.batch.evaluate_batch`."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from plait.cost.batch import TIME_ITEMS, evaluate_batch
from plait.cost.estimate import Estimate, MemoryBreakdown, TimeBreakdown
from plait.cost.framework import DEFAULT, Framework
from plait.cost.memory import MEMORY_ITEMS
from plait.hardware.cluster import Cluster
from plait.plan import rules
from plait.plan.columns import PlanColumns
from plait.plan.plan import Plan
from plait.workload.model import ModelSpec

if TYPE_CHECKING:
    from plait.simulate.pipeline import Timeline


SIMULATED_PASSES = 192
"""Pipelines with at most this many chunk passes (pp x micro-batches x vpp) are timed by the event
simulation in :func:`estimate`. Assumed: at ~9 us per pass plus ~1 ms setup (``python
benchmarks/estimate_speed.py`` and the per-layout timings in docs/simulator.md), estimate and
simulation together stay under 5 ms on the 2-core CI machine. These small pipelines are the ones
where fill and drain weigh most and the closed forms drift furthest (up to 2%)."""


def estimate(model: ModelSpec, cluster: Cluster, plan: Plan, *,
             framework: Framework = DEFAULT, check: bool = True, simulate: bool | None = None) -> Estimate:
    """Predict memory and step time of ``plan`` for ``model`` on ``cluster``.

    Pipelines are timed by the closed forms of :mod:`plait.cost.pipeline` (about a millisecond),
    or by the event simulation (:func:`refine_pipeline`) when ``simulate`` is true, or, when it is
    ``None``, for pipelines small enough to simulate within the estimate budget
    (:data:`SIMULATED_PASSES`). The closed forms agree with the simulation within 1% on 31 of 36 dev
    layouts and within 2% on all; the small-pipeline rule simulates 4 of those 5
    (docs/simulator.md)."""
    plan = plan.with_seq_len(model.seq_len)
    if check:
        rules.check_plan(plan, model, cluster)
    result = evaluate_batch(model, cluster, PlanColumns.from_plans([plan]), framework)
    est = estimate_from_batch(model, cluster, result, 0)
    return refine_pipeline(model, cluster, est, framework) if wants_simulation(plan, simulate) else est


def wants_simulation(plan: Plan, simulate: bool | None = None) -> bool:
    """Whether :func:`estimate` times ``plan``'s pipeline by the event simulation."""
    if plan.pp == 1 or simulate is False:
        return False
    return simulate is True or plan.pp * plan.num_micro_batches * plan.vpp <= SIMULATED_PASSES


def refine_pipeline(model: ModelSpec, cluster: Cluster, est: Estimate, framework: Framework = DEFAULT,
                    timeline: Timeline | None = None) -> Estimate:
    """Replace the closed-form pipeline and data-parallel tail by the event simulation of the step
    (``timeline``, when the caller has already simulated ``est.plan``).

    The closed forms (:mod:`plait.cost.pipeline`) agree with the simulation within about 1% on
    uniform stages; with uneven stages, few micro-batches or many virtual stages they can drift
    by a few percent; ``estimate(simulate=True)``, ``plait simulate`` and the planner's top plans
    take the simulated time this way."""
    from plait.simulate.step import simulate_step

    if timeline is None:
        timeline = simulate_step(model, cluster, est.plan, framework)
    t = dict(est.time.items())
    busy = sum(t[k] for k in ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "fsdp_comm"))
    pipeline = max(max(timeline.pipeline_end_s), busy)
    p2p = min(t["pp_p2p"], pipeline - busy)
    tail = timeline.step_time_s - max(timeline.pipeline_end_s)
    scale = tail / (t["dp_comm"] + t["optimizer"]) if t["dp_comm"] + t["optimizer"] > 0 else 0.0
    time = replace(est.time, pp_p2p_s=p2p, pp_bubble_s=pipeline - busy - p2p,
                   dp_comm_s=t["dp_comm"] * scale, optimizer_s=t["optimizer"] * scale if scale else tail)
    return replace(est, time=time)


def estimate_from_batch(model: ModelSpec, cluster: Cluster, result, row: int) -> Estimate:  # type: ignore[no-untyped-def]
    """Row ``row`` of a :class:`~plait.cost.batch.BatchResult` as an Estimate."""
    plan = result.cols.plan(row)
    mem = result.memory
    memory = MemoryBreakdown(
        stage=int(result.memory_stage[row]),
        capacity_bytes=cluster.accelerator.memory_bytes,
        inflight_micro_batches=float(mem["inflight"][row]),
        **{f"{k}_bytes": float(mem[k][row]) for k in MEMORY_ITEMS},
    )
    time = TimeBreakdown(**{f"{k}_s": float(result.time[k][row]) for k in TIME_ITEMS})
    tokens = plan.global_batch * plan.seq_len
    model_flops = float(result.model_flops_per_token[row]) * tokens
    return Estimate(
        model_name=model.name, cluster_name=cluster.name, plan=plan, memory=memory, time=time,
        tokens_per_step=tokens, model_flops_per_step=model_flops,
        hardware_flops_per_step=model_flops * float(result.recompute_factor[row]),
        peak_flops_per_gpu=cluster.accelerator.peak_flops("fp8" if plan.precision == "fp8" else "bf16"),
        price_per_gpu_hour_usd=cluster.price_per_gpu_hour_usd,
        warnings=rules.warnings(plan, model, cluster),
    )
