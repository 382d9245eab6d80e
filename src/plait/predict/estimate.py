"""One estimate: a batch of one plan through :func:`plait.cost.batch.evaluate_batch`, its pipeline re-timed by
the event simulation where the closed forms drift (:func:`refined_time`).

:func:`assemble` is the one place an estimate is put together from a batch row, with the one refinement rule
(:func:`wants_simulation`): ``plait estimate`` (:func:`predict`), the planner's top plans
(:meth:`plait.search.runner.SearchResult.top`), ``plait validate`` (:func:`plait.validate.report.fill_row`) and
``plait report`` all call it."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from plait.cost.batch import BatchResult, evaluate_batch
from plait.cost.estimate import Estimate, TimeBreakdown
from plait.cost.step import estimate_from_batch
from plait.engine.capability import first_unsupported
from plait.engine.engine import Engine
from plait.hardware.cluster import Cluster
from plait.job import Job
from plait.plan.plan import Plan
from plait.predict.intervals import step_interval_s
from plait.simulate.step import MAX_PASSES, chunk_passes, simulate_step
from plait.workload.model import ModelSpec

if TYPE_CHECKING:
    from plait.simulate.pipeline import Timeline


SIMULATED_PASSES = 192
"""Pipelines with at most this many chunk passes (pp x micro-batches x vpp) are timed by the event
simulation in :func:`estimate`: the small pipelines, where fill and drain weigh most and the closed forms
drift furthest (up to 1.3% on the dev layouts it covers). Chosen when a simulation cost ~1 ms plus 9 us a
pass; a simulated step now costs 0.29 ms for 405B PP8 with 8 micro-batches and 0.57 ms for 1,536 passes
(docs/simulator.md), so the bound could grow, but it is kept: moving it changes validated predictions, which must
stay as they are."""


def predict(job: Job, *, simulate: bool | None = None, timeline: Timeline | None = None) -> Estimate:
    """Predict memory and step time of ``job`` (``timeline``: its step already simulated, see :func:`assemble`).

    Pipelines are timed by the closed forms of :mod:`plait.cost.pipeline` (about a millisecond),
    or by the event simulation (:func:`refined_time`) when ``simulate`` is true, or, when it is
    ``None``, for pipelines small enough to simulate within the estimate budget
    (:data:`SIMULATED_PASSES`). The closed forms agree with the simulation within 1% on 31 of 36 dev
    layouts and within 2% on all; the small-pipeline rule simulates 4 of those 5
    (docs/simulator.md). A plan the engine cannot run is still estimated, with a warning naming the option."""
    if job.plan.per_stage:  # stages that differ: costed one at a time (plait.cost.per_stage, loaded for them only)
        from plait.cost.per_stage import evaluate_per_stage

        result = evaluate_per_stage(job.model, job.cluster, job.columns, job.framework)
    else:
        result = evaluate_batch(job.model, job.cluster, job.columns, job.framework)
    return assemble(job, result, 0, simulate=simulate, timeline=timeline)


def estimate(model: ModelSpec, cluster: Cluster, plan: Plan, *, engine: Engine,
             simulate: bool | None = None) -> Estimate:
    """:func:`predict` of the job :meth:`Job.build` makes of these (a library and test convenience)."""
    return predict(Job.build(model, cluster, plan, engine), simulate=simulate)


def assemble(job: Job, result: BatchResult, row: int, *, simulate: bool | None = None,
             timeline: Timeline | None = None) -> Estimate:
    """Row ``row`` of ``result`` (the costed plan of ``job``) as ``job``'s estimate: a warning when the engine
    cannot run the plan, and the pipeline re-timed by the event simulation when :func:`wants_simulation` says so
    (``simulate``: ``None`` the small-pipeline rule, as ``plait estimate`` and ``plait validate`` take it; ``True``
    every pipeline, as the planner's top plans and ``plait report`` take it; ``timeline``: the step already
    simulated, when the caller has it)."""
    notes = []
    refusal = first_unsupported(job.plan, job.model, job.engine, cols=job.columns)
    if refusal:
        notes.append(f"{refusal} (estimated as if it could)")
    notes += ((job.engine.resolved,) if job.engine.resolved else ()) + job.notes + job.model.unmodelled
    if job.plan.per_stage and job.engine.name != "plait":  # no engine's configuration states a mode per stage
        notes.append("stage_recompute, stage_layers, stage_sharding and stage_tp run on plait's runtime (plait run); "
                     f"{job.engine.name}'s configuration does not state them per stage (estimated as if it could)")
    retime = None
    if not wants_simulation(job.plan, simulate):
        if simulate is True and job.plan.pp > 1:  # asked for, past the simulation's bound
            notes.append(f"pipeline timed by the closed forms: its {chunk_passes(job.plan):,} chunk passes exceed the "
                         f"event simulation's {MAX_PASSES:,}")
    else:
        if timeline is None:
            timeline = simulate_step(job, record=False, prepared=result.prepared)
        retime = partial(refined_time, timeline=timeline)
    return estimate_from_batch(job.model, job.cluster, result, row, job.engine.spec, step_interval_s, retime=retime,
                               notes=notes)


def wants_simulation(plan: Plan, simulate: bool | None = None) -> bool:
    """Whether :func:`assemble` times ``plan``'s pipeline by the event simulation (never past its bound,
    :data:`plait.simulate.step.MAX_PASSES`)."""
    if plan.pp == 1 or simulate is False or chunk_passes(plan) > MAX_PASSES:  # past the simulation's bound
        return False
    return simulate is True or chunk_passes(plan) <= SIMULATED_PASSES


def refined_time(t: TimeBreakdown, timeline: Timeline) -> TimeBreakdown:
    """The closed-form breakdown ``t`` with its pipeline and data-parallel tail taken from the event simulation of
    the step (``timeline``).

    The closed forms (:mod:`plait.cost.pipeline`) agree with the simulation within about 1% on
    uniform stages; with uneven stages, few micro-batches or many virtual stages they can drift
    by a few percent; ``estimate(simulate=True)``, ``plait simulate`` and the planner's top plans
    take the simulated time this way."""
    busy = t.compute_s + t.recompute_s + t.tp_comm_s + t.cp_comm_s + t.ep_comm_s + t.fsdp_comm_s + t.host_s
    pipeline = max(max(timeline.pipeline_end_s), busy)
    p2p = min(t.pp_p2p_s, pipeline - busy)
    tail = timeline.step_time_s - max(timeline.pipeline_end_s)
    scale = tail / (t.dp_comm_s + t.optimizer_s) if t.dp_comm_s + t.optimizer_s > 0 else 0.0
    # dataclasses.replace's result in one call (replace walks the fields in Python, ~370 interpreter steps): every
    # field of TimeBreakdown is an init field
    return type(t)(**{**vars(t), "pp_p2p_s": p2p, "pp_bubble_s": pipeline - busy - p2p,
                      "dp_comm_s": t.dp_comm_s * scale, "optimizer_s": t.optimizer_s * scale if scale else tail})
