"""Per-rank operation durations for the simulator, from the same cost functions the estimator uses.

The plan's per-layer quantities are costed once (:func:`plait.cost.prepared.prepare`); each rank's stage is
then costed on them, once per distinct stage (:func:`plait.cost.batch.stage_pass`): stages with the same layer
counts and the same ends (embedding on the first, output layer on the last) cost the same. The memory of every
stage (:func:`stage_memories`) is costed the same way, for the per-stage picture."""

from __future__ import annotations

import numpy as np

from plait.cost.batch import stage_class, stage_pass, stage_sync
from plait.cost.dataparallel import kept_gathered
from plait.cost.memory import stage_memory
from plait.cost.per_stage import boundary_p2p_s, stage_views
from plait.cost.prepared import Prepared, prepare
from plait.job import Job
from plait.kept import Kept
from plait.plan.columns import PlanColumns
from plait.plan.ops import SCALAR
from plait.simulate.pipeline import PipelineCosts

_COSTS: Kept[PipelineCosts] = Kept(256)


def pipeline_costs(job: Job, prepared: Prepared | None = None) -> PipelineCosts:
    """Durations of every rank of one pipeline of ``job`` (``prepared``: the plan's shared quantities, when the
    estimate has them already, :attr:`plait.cost.batch.BatchResult.prepared`). A function of the job's model,
    cluster, engine facts and plan alone, kept by the plan's value and the others' identity (held by the entry, as
    :func:`plait.job._check_once` keeps a checked plan) for the last 256 jobs: a plan estimated again does not cost
    its stages again. The durations are shared: not to be changed (``dataclasses.replace`` makes another)."""
    model, cluster, framework = job.model, job.cluster, job.framework
    key = (id(model), id(cluster), id(framework), job.plan)
    return _COSTS.get(key, (model, cluster, framework), lambda: _costed(job, prepared))


def _costed(job: Job, prepared: Prepared | None) -> PipelineCosts:
    """:func:`pipeline_costs`, costed."""
    model, cluster, plan, framework = job.model, job.cluster, job.plan, job.framework
    if prepared is None or prepared.framework is not framework or (prepared.cols.single is not plan
                                                                   and prepared.cols.single != plan):
        prepared = prepare(model, cluster, job.columns, framework)
    views = stage_views(model, cluster, plan, framework) if plan.per_stage else None  # plait.cost.per_stage
    p2p, v = (prepared.p2p_s if views is None else boundary_p2p_s(cluster, views)), plan.vpp
    per_rank, distinct = [], {}
    # one reduction after the last backward where the stage keeps its parameters gathered (its own sharding)
    kept_uniform = bool(kept_gathered(prepared.cols, framework.pipeline_keeps_gathered)) if views is None else False
    for stage in range(plan.pp):  # each distinct stage (its layer counts and ends: stage_pass's key) costed once
        model_s, prepared_s = (model, prepared) if views is None else (views[stage].model, views[stage].prepared)
        kind = stage_class(model_s, prepared_s, stage)
        key = (kind, id(prepared_s))
        if key not in distinct:
            dense, moe = kind[0], kind[1]
            fwd, bwd = stage_pass(model_s, cluster, prepared_s, stage)
            sync = stage_sync(model_s, cluster, prepared_s, stage)
            kept = kept_uniform if views is None else bool(kept_gathered(prepared_s.cols,
                                                                         framework.pipeline_keeps_gathered))
            distinct[key] = (SCALAR.total(fwd.values()) / v, SCALAR.total(bwd.values()) / v,
                             bwd["compute"] / (2 * v),  # weight-gradient GEMMs: half of the backward's (Qi et al. 2023)
                             sync.reduce_s, sync.gather_s, 1 if kept else dense + moe, sync.optimizer_s)
        per_rank.append(distinct[key])
    forward, backward, weight, reduce, gather, buckets, optimizer = (list(x) for x in zip(*per_rank, strict=True))
    if framework.p2p_blocking and plan.pp > 1:  # each chunk's exchange holds its rank (plait.cost.p2p)
        forward, backward, p2p = [f + float(p2p) for f in forward], [b + float(p2p) for b in backward], 0.0
    return PipelineCosts(
        p=plan.pp, m=plan.num_micro_batches, v=v, schedule=plan.schedule if plan.pp > 1 else "1f1b",
        forward_s=forward, backward_s=backward, weight_grad_s=weight, p2p_s=float(p2p), grad_reduce_s=reduce,
        param_gather_s=gather, buckets=buckets, overlap_grad_reduce=plan.overlap_grad_reduce, optimizer_s=optimizer,
    )


def stage_memories(job: Job) -> list[dict[str, float]]:
    """Memory breakdown of every pipeline stage of ``job`` (for the per-stage picture)."""
    plan = job.plan
    if plan.per_stage:  # each stage as the uniform plan that costs it (plait.cost.per_stage)
        views = stage_views(job.model, job.cluster, plan, job.framework)
        return [{k: float(v) for k, v in stage_memory(view.model, job.cluster.accelerator, view.prepared.cols,
                                                      view.prepared.inner, s, view.prepared.framework).items()}
                for s, view in enumerate(views)]
    stages = np.arange(plan.pp)
    cols = PlanColumns.from_plans([plan]).take(np.zeros(plan.pp, dtype=np.int64))
    prepared = prepare(job.model, job.cluster, cols, job.framework)
    memory = stage_memory(job.model, job.cluster.accelerator, prepared.cols, prepared.inner, stages, prepared.framework)
    return [{k: float(v[i]) for k, v in memory.items()} for i in range(plan.pp)]
