"""Per-stage recomputation, sharding, layer counts and TP degrees for the planner's top pipeline plans.

After the uniform search, each of the top plans that pipelines with 1F1B is re-split by the dynamic program of
:mod:`plait.search.stage_program` (every stage its own layers, recomputation and sharding) and, where its stages are
unbalanced, with a TP degree per stage (:mod:`plait.search.stage_tp`). The winner is then estimated as any plan is
(:func:`plait.predict.estimate.assemble`, simulated where the top plans are) and kept only where it beats the uniform
plan it came from.
"""

from __future__ import annotations

from dataclasses import dataclass

from plait.cost.estimate import Estimate
from plait.engine.engine import Engine
from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.job import Job
from plait.plan.plan import Plan
from plait.predict.estimate import assemble, predict
from plait.search.runner import SearchResult
from plait.search.stage_program import Kept, best_split
from plait.search.stage_tp import tp_splits
from plait.workload.model import ModelSpec

PIPELINES = 5
"""Uniform pipelines re-split per stage: those among the top plans and, beyond them, the best-ranked until this many
(assumed: a pipeline ranked far down gains less from re-splitting than it trails by)."""
SCANNED = 5000
"""Ranked plans looked at for those pipelines (a bound on the scan where few plans pipeline)."""
@dataclass(frozen=True, kw_only=True)
class StageWin:
    """A per-stage plan that beats the uniform plan it was derived from."""

    uniform: Estimate
    """The uniform plan, as the planner ranked it."""
    better: Estimate
    """The per-stage plan."""

    @property
    def gain(self) -> float:
        """Throughput gained over the uniform plan (the same global batch), as a fraction."""
        return self.better.tokens_per_s / self.uniform.tokens_per_s - 1.0


def pipelines(result: SearchResult, top: list[Estimate], k: int = PIPELINES) -> list[Estimate]:
    """The first ``k`` eligible pipelines of ``top`` and, beyond it, the best-ranked eligible pipelines until ``k``
    of them are in hand (the first :data:`SCANNED` ranked plans looked at; those beyond ``top`` by the closed
    forms: :func:`improve` times them as ``top`` is timed where a per-stage plan beats them). ``k`` bounds the pass
    however many plans ``--top`` lists."""
    out = [e for e in top if _eligible(e.plan)][:k]
    found = len(out)
    listed = {e.plan for e in top}
    for _, chunk, row in result.ranking()[:SCANNED]:
        if found >= k:
            break
        batch = result.feasible[chunk][1]
        cols = batch.cols
        if cols["pp"][row] < 2 or cols["vpp"][row] != 1 or not cols.is_("schedule", "1f1b")[row] or cols["dp_sync"][row]:
            continue
        plan = cols.plan(row)
        if plan in listed:
            continue
        job = Job.checked(result.model, result.cluster, plan, result.engine)
        out.append(assemble(job, batch, row, simulate=False))  # simulated only where a per-stage plan beats it
        found += 1
    return out


def improve(model: ModelSpec, cluster: Cluster, engine: Engine, top: list[Estimate], memory_margin: float,
            simulate: bool = True, vary_sharding: bool = True, vary_tp: bool = True) -> list[StageWin]:
    """The per-stage plans that beat each of ``top`` (uniform estimates) where one does, fastest first
    (``vary_sharding``: stages may shard differently, else each keeps its plan's sharding; ``vary_tp``: stages may
    take their own TP degree, :mod:`plait.search.stage_tp`)."""
    limit = cluster.accelerator.memory_bytes * (1.0 - memory_margin)
    wins = []
    kept: Kept = {}  # stage cells and resized models, costed once for the whole pass
    for uniform in top:
        plan = uniform.plan
        if not _eligible(plan):
            continue
        found = [best_split(model, cluster, engine, plan, limit, vary_sharding, kept)]
        if vary_tp:  # a TP degree per stage (plait.search.stage_tp), where the uniform plan's stages are unbalanced
            found += tp_splits(model, cluster, engine, plan, limit, kept=kept)
        found = [c for c in found if c is not None]
        if not found:  # the even split wins and no stage is unbalanced: nothing to cost against the uniform plan
            continue
        same = Job.build(model, cluster, plan, engine)
        base = predict(same, simulate=False)
        best: tuple[Job, Estimate] | None = None
        for candidate in found:
            try:
                job = Job.build(model, cluster, candidate, engine)
            except ConfigError:
                continue
            closed = predict(job, simulate=False)  # the closed forms decide
            if closed.memory.total_bytes <= limit and closed.step_time_s < (base if best is None else best[1]).step_time_s:
                best = (job, closed)
        if best is None:
            continue
        job, closed = best
        if simulate:  # a winner and its uniform plan timed as the top plans are
            closed, base = predict(job, simulate=True), predict(same, simulate=True)
        if closed.step_time_s < base.step_time_s:
            wins.append(StageWin(uniform=base, better=closed))
    return sorted(wins, key=lambda w: -w.better.target_tokens_per_s)


def _eligible(plan: Plan) -> bool:
    """A uniform 1F1B pipeline of one chunk per rank under the all-reduce (:mod:`plait.plan.per_stage`)."""
    return (plan.pp > 1 and plan.schedule == "1f1b" and plan.vpp == 1 and plan.dp_sync.is_allreduce
            and not plan.per_stage)
