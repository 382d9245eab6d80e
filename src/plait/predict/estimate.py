"""One estimate: a batch of one plan through :func:`plait.cost.batch.evaluate_batch`, its pipeline re-timed by
the event simulation where the closed forms drift (:func:`refine_pipeline`)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from plait.cost.batch import evaluate_batch
from plait.cost.estimate import Estimate
from plait.cost.framework import Framework
from plait.cost.step import estimate_from_batch
from plait.engine.capability import first_unsupported
from plait.engine.catalog import get_engine
from plait.engine.engine import Engine
from plait.hardware.cluster import Cluster
from plait.plan import rules
from plait.plan.columns import PlanColumns
from plait.plan.plan import Plan
from plait.predict.job import Job
from plait.workload.model import ModelSpec

if TYPE_CHECKING:
    from plait.simulate.pipeline import Timeline


SIMULATED_PASSES = 192
"""Pipelines with at most this many chunk passes (pp x micro-batches x vpp) are timed by the event
simulation in :func:`estimate`: the small pipelines, where fill and drain weigh most and the closed forms
drift furthest (up to 1.3% on the dev layouts it covers). Chosen when a simulation cost ~1 ms plus 9 us a
pass; the sweep now costs ~0.1 ms plus ~0.3-0.5 us a pass (0.25 ms for 405B PP8 with 8 micro-batches, 0.84 ms
for 1,536 passes; docs/simulator.md), so the bound could grow, but it is kept: moving it changes validated
predictions, which must stay as they are."""


def predict(job: Job, *, check: bool = True, simulate: bool | None = None) -> Estimate:
    """Predict memory and step time of ``job`` (see :func:`estimate`)."""
    return estimate(job.model, job.cluster, job.plan, engine=job.engine, check=check, simulate=simulate)


def estimate(model: ModelSpec, cluster: Cluster, plan: Plan, *, engine: Engine | None = None,
             framework: Framework | None = None, check: bool = True, simulate: bool | None = None) -> Estimate:
    """Predict memory and step time of ``plan`` for ``model`` on ``cluster`` as ``engine`` runs it (default
    :data:`plait.engine.catalog.DEFAULT_ENGINE`); ``framework`` overrides the engine's cost facts.

    Pipelines are timed by the closed forms of :mod:`plait.cost.pipeline` (about a millisecond),
    or by the event simulation (:func:`refine_pipeline`) when ``simulate`` is true, or, when it is
    ``None``, for pipelines small enough to simulate within the estimate budget
    (:data:`SIMULATED_PASSES`). The closed forms agree with the simulation within 1% on 31 of 36 dev
    layouts and within 2% on all; the small-pipeline rule simulates 4 of those 5
    (docs/simulator.md). A plan the engine cannot run is still estimated, with a warning naming the option."""
    engine = engine or get_engine()
    framework = framework or engine.framework
    plan = plan.with_seq_len(model.seq_len)
    cols = PlanColumns.one(plan)
    if check:
        rules.check_plan(plan, model, cluster, cols=cols)
    result = evaluate_batch(model, cluster, cols, framework)
    est = estimate_from_batch(model, cluster, result, 0, engine.spec)
    refusal = first_unsupported(plan, model, engine, cols=cols)
    if refusal:
        est = replace(est, warnings=[*est.warnings, f"{refusal} (estimated as if it could)"])
    if not wants_simulation(plan, simulate):
        return est
    from plait.simulate.step import simulate_step

    timeline = simulate_step(model, cluster, plan, framework, record=False, prepared=result.prepared)
    return refine_pipeline(model, cluster, est, framework, timeline)


def wants_simulation(plan: Plan, simulate: bool | None = None) -> bool:
    """Whether :func:`estimate` times ``plan``'s pipeline by the event simulation."""
    if plan.pp == 1 or simulate is False:
        return False
    return simulate is True or plan.pp * plan.num_micro_batches * plan.vpp <= SIMULATED_PASSES


def refine_pipeline(model: ModelSpec, cluster: Cluster, est: Estimate, framework: Framework,
                    timeline: Timeline | None = None) -> Estimate:
    """Replace the closed-form pipeline and data-parallel tail by the event simulation of the step
    (``timeline``, when the caller has already simulated ``est.plan``).

    The closed forms (:mod:`plait.cost.pipeline`) agree with the simulation within about 1% on
    uniform stages; with uneven stages, few micro-batches or many virtual stages they can drift
    by a few percent; ``estimate(simulate=True)``, ``plait simulate`` and the planner's top plans
    take the simulated time this way."""
    from plait.simulate.step import simulate_step

    if timeline is None:
        timeline = simulate_step(model, cluster, est.plan, framework, record=False)
    t = est.time
    busy = t.compute_s + t.recompute_s + t.tp_comm_s + t.cp_comm_s + t.ep_comm_s + t.fsdp_comm_s
    pipeline = max(max(timeline.pipeline_end_s), busy)
    p2p = min(t.pp_p2p_s, pipeline - busy)
    tail = timeline.step_time_s - max(timeline.pipeline_end_s)
    scale = tail / (t.dp_comm_s + t.optimizer_s) if t.dp_comm_s + t.optimizer_s > 0 else 0.0
    time = replace(t, pp_p2p_s=p2p, pp_bubble_s=pipeline - busy - p2p,
                   dp_comm_s=t.dp_comm_s * scale, optimizer_s=t.optimizer_s * scale if scale else tail)
    return replace(est, time=time)
