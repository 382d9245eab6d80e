"""Per-stage recomputation and layer counts for the planner's top pipeline plans, by dynamic programming.

After the uniform search, each of the top plans that pipelines with 1F1B is re-split: every stage ``s`` takes
``n_s`` layers (within :data:`LAYER_WINDOW` of the even split, summing to the model's) and its own recomputation
mode ``r_s`` (none, selective, full), each stage within the memory limit. The step to minimise is 1F1B's closed form
``m * max_s t_s + (p - 1) * mean_s t_s`` (Narayanan et al. 2021, Sec. 2.2.2; :func:`plait.cost.pipeline.
pipeline_time_s`), ``t_s`` the stage's forward and backward per micro-batch. As in Alpa's inter-operator pass
(Zheng et al., OSDI 2022, arXiv 2201.12023, Sec. 5.2: enumerate the slowest stage's time, then a dynamic program
over stages minimises the sum under it) every candidate bound ``T`` (each distinct ``t``) is tried, and for each a
dynamic program over stages and layers used so far keeps the least summed time of stages whose ``t <= T`` and whose
memory fits (Galvatron, Miao et al., VLDB 2023, arXiv 2211.13878, Sec. 4: a DP over layers under a memory budget).

``t`` and memory come from the cost model itself (:mod:`plait.cost.per_stage`): ``t`` for the first, an interior
and the last stage at each (layers, mode) pair, memory for every stage (1F1B's stage ``s`` holds ``p - s``
micro-batches). Complexity per plan: ``3 W R`` stage passes and ``p W R`` stage memories (``W`` layer counts,
``R = 3`` modes), then ``O(|T| p W L)`` for the programs (``|T| <= 3 W R``, ``L`` layers), vectorized over ``L``.
The winner is then estimated as any plan is (:func:`plait.predict.estimate.assemble`, simulated where the top
plans are) and kept only where it beats the uniform plan it came from.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from plait.cost.batch import stage_pass
from plait.cost.estimate import Estimate
from plait.cost.memory import stage_memory
from plait.cost.per_stage import stage_views
from plait.engine.engine import Engine
from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.job import Job
from plait.plan.ops import SCALAR
from plait.plan.plan import Plan
from plait.predict.estimate import assemble, predict
from plait.search.runner import SearchResult
from plait.workload.model import ModelSpec

MODES = ("none", "selective", "full")
PIPELINES = 5
"""Uniform pipelines re-split per stage: those among the top plans and, beyond them, the best-ranked until this many
(assumed: a pipeline ranked far down gains less from re-splitting than it trails by)."""
SCANNED = 5000
"""Ranked plans looked at for those pipelines (a bound on the scan where few plans pipeline)."""
TIE = 1e-9
"""Relative weight of a stage's distance from the even split in the program's sum: it breaks ties only."""
LAYER_WINDOW = 3
"""Layers a stage may hold beyond or short of the even split (assumed: the memory a stage frees by recomputing
pays for a few layers, not for many; a wider window widens the program linearly)."""


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
    """``top`` and, beyond it, the best-ranked eligible pipelines until ``k`` of them are in hand (the first
    :data:`SCANNED` ranked plans looked at), as the planner estimates its top plans (simulated)."""
    out, found = list(top), sum(_eligible(e.plan) for e in top)
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
        out.append(assemble(job, batch, row, simulate=True))
        found += 1
    return out


def improve(model: ModelSpec, cluster: Cluster, engine: Engine, top: list[Estimate], memory_margin: float,
            simulate: bool = True) -> list[StageWin]:
    """The per-stage plans that beat each of ``top`` (uniform estimates) where one does, fastest first."""
    limit = cluster.accelerator.memory_bytes * (1.0 - memory_margin)
    wins = []
    for uniform in top:
        plan = uniform.plan
        if not _eligible(plan):
            continue
        found = best_split(model, cluster, engine, plan, limit)
        if found is None:
            continue
        try:
            job = Job.build(model, cluster, found, engine)
        except ConfigError:
            continue
        better = predict(job, simulate=simulate)
        if better.memory.total_bytes <= limit and better.step_time_s < uniform.step_time_s:
            wins.append(StageWin(uniform=uniform, better=better))
    return sorted(wins, key=lambda w: -w.better.target_tokens_per_s)


def _eligible(plan: Plan) -> bool:
    """A uniform 1F1B pipeline of one chunk per rank under the all-reduce (:mod:`plait.plan.per_stage`)."""
    return (plan.pp > 1 and plan.schedule == "1f1b" and plan.vpp == 1 and plan.dp_sync.is_allreduce
            and not plan.per_stage)


def best_split(model: ModelSpec, cluster: Cluster, engine: Engine, plan: Plan, limit_bytes: float) -> Plan | None:
    """The per-stage plan the dynamic program finds for ``plan`` (``None``: the uniform split is the best, or
    nothing fits)."""
    p, num_layers = plan.pp, model.num_layers
    even = num_layers // p
    alike = model.moe is None and model.local_attention is None
    counts = list(range(max(1, even - LAYER_WINDOW), even + LAYER_WINDOW + 1)) if alike else [even]
    if not alike and num_layers % p:
        return None  # stages of unequal count whose layers differ by index: the even split stays
    base = replace(plan, recompute_layers=-1)
    t = np.full((p, len(counts), len(MODES)), np.inf)
    fits = np.zeros((p, len(counts), len(MODES)), dtype=bool)
    for j, n in enumerate(counts):
        for k, mode in enumerate(MODES):
            trial = replace(base, recompute=mode, stage_recompute=(mode,) * p,
                            stage_layers=(n,) * p if alike else ())
            views = stage_views(model, cluster, trial, engine.framework)
            view = views[0]
            ends = {0: None, p - 1: None, min(1, p - 1): None}
            for stage in ends:
                fwd, bwd = stage_pass(view.model, cluster, view.prepared, stage)
                ends[stage] = SCALAR.total(fwd.values()) + SCALAR.total(bwd.values())
            for stage in range(p):
                t[stage, j, k] = ends[stage if stage in (0, p - 1) else min(1, p - 1)]
                memory = stage_memory(view.model, cluster.accelerator, view.prepared.cols, view.prepared.inner, stage,
                                      view.prepared.framework)
                fits[stage, j, k] = memory["total"] <= limit_bytes
    chosen = _program(t, fits, np.array(counts), num_layers, plan.num_micro_batches)
    if chosen is None:
        return None
    layers, modes = chosen
    if len(set(modes)) == 1 and (not alike or layers == _even(num_layers, p)):
        return None  # the uniform plan (or a uniform mode the search already ranked)
    return replace(plan, recompute=modes[0], recompute_layers=-1, stage_recompute=modes,
                   stage_layers=layers if alike and layers != _even(num_layers, p) else ())


def _even(num_layers: int, p: int) -> tuple[int, ...]:
    base, extra = divmod(num_layers, p)
    return tuple(base + (s < extra) for s in range(p))


def _program(t: np.ndarray, fits: np.ndarray, counts: np.ndarray, num_layers: int,
             m: int) -> tuple[tuple[int, ...], tuple[str, ...]] | None:
    """Layers and mode per stage minimising ``m max t + (p - 1) mean t`` (module docstring), or ``None``."""
    p = t.shape[0]
    best: tuple[float, tuple[int, ...], tuple[str, ...]] | None = None
    for bound in np.unique(t[fits]):
        if best is not None and m * bound >= best[0]:
            break  # every later bound costs more in its busy term alone
        allowed = fits & (t <= bound)
        cheapest = np.where(allowed, t, np.inf)
        mode_of = cheapest.argmin(axis=2)  # per stage and layer count, the fastest mode that is allowed
        # ties (sums equal to the float) go to the split nearest the even one: it moves no parameters between stages
        stage_t = cheapest.min(axis=2) + TIE * t[fits].max() * np.abs(counts - num_layers / p)
        total = np.full(num_layers + 1, np.inf)
        total[0] = 0.0
        picks = []
        for s in range(p):
            step = np.full(num_layers + 1, np.inf)
            pick = np.full(num_layers + 1, -1)
            for j, n in enumerate(counts):
                if not np.isfinite(stage_t[s, j]) or n > num_layers:
                    continue
                moved = np.full(num_layers + 1, np.inf)
                moved[n:] = total[:num_layers + 1 - n] + stage_t[s, j]
                better = moved < step
                step[better], pick[better] = moved[better], j
            total = step
            picks.append(pick)
        if not np.isfinite(total[num_layers]):
            continue
        layers, modes, used = [], [], num_layers
        for s in range(p - 1, -1, -1):
            j = int(picks[s][used])
            layers.append(int(counts[j]))
            modes.append(MODES[int(mode_of[s, j])])
            used -= int(counts[j])
        layers.reverse()
        modes.reverse()
        times = [t[s, counts.tolist().index(n), MODES.index(r)] for s, (n, r) in enumerate(zip(layers, modes))]
        cost = m * max(times) + (p - 1) * sum(times) / p
        if best is None or cost < best[0]:
            best = (cost, tuple(layers), tuple(modes))
    return None if best is None else (best[1], best[2])
