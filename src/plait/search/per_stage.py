"""Per-stage recomputation, sharding and layer counts for the planner's top pipeline plans, by dynamic programming.

After the uniform search, each of the top plans that pipelines with 1F1B is re-split: every stage ``s`` takes
``n_s`` layers (within :data:`LAYER_WINDOW` of the even split, summing to the model's), its own recomputation
mode ``r_s`` (none, selective, full) and, where the plan has ``dp_shard`` ranks, its own ZeRO stage ``z_s``
(:data:`SHARDINGS` that meet the plan rules and the engine), each stage within the memory limit. The step to
minimise is 1F1B's closed form ``m * max_s t_s + (p - 1) * mean_s t_s`` (Narayanan et al. 2021, Sec. 2.2.2;
:func:`plait.cost.pipeline.pipeline_time_s`), ``t_s`` the stage's forward and backward per micro-batch, plus the
longest stage tail ``max_s u_s`` (exposed gradient sync and optimizer step after the last backward; each stage
reduces over its own group). As in Alpa's inter-operator pass (Zheng et al., OSDI 2022, arXiv 2201.12023,
Sec. 5.2: enumerate the slowest stage's time, then a dynamic program over stages minimises the sum under it) every
candidate bound ``U`` (each choice's tail) and, under it, every bound ``T`` (each distinct ``t``) is tried, and for
each a dynamic program over stages and layers used so far keeps the least summed time of stages whose ``t <= T``,
whose tail ``<= U`` and whose memory fits (Galvatron, Miao et al., VLDB 2023, arXiv 2211.13878, Sec. 4: a DP over
layers under a memory budget). A choice's tail is taken at the even layer count, the longest of its first,
interior and last stage (assumed: a few layers more or less move a stage's gradient bytes by a few percent; the
winner is costed exactly afterwards).

``t`` and memory come from the cost model itself (:mod:`plait.cost.per_stage`): ``t`` for the first, an interior
and the last stage at each (layers, mode, sharding), memory for every stage (1F1B's stage ``s`` holds ``p - s``
micro-batches). Complexity per plan: ``3 W C`` stage passes and ``p W C`` stage memories (``W`` layer counts,
``C = 3 Z`` choices of ``R = 3`` modes by ``Z <= 3`` shardings), then ``O(|U| |T| p W L)`` for the programs
(``|U| <= C``, ``|T| <= 3 W C``, ``L`` layers), vectorized over ``L``; both bounds stop once the busy term alone
costs more than the best found. The winner is then estimated as any plan is (:func:`plait.predict.estimate.
assemble`, simulated where the top plans are) and kept only where it beats the uniform plan it came from.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from plait.cost.batch import stage_pass
from plait.cost.estimate import Estimate
from plait.cost.memory import stage_memory
from plait.cost.per_stage import StageView, stage_tail, stage_view
from plait.engine.capability import first_unsupported
from plait.engine.engine import Engine
from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.job import Job
from plait.plan.ops import SCALAR
from plait.plan.plan import Plan
from plait.plan.rules import first_violation
from plait.predict.estimate import assemble, predict
from plait.search.runner import SearchResult
from plait.workload.model import ModelSpec

MODES = ("none", "selective", "full")
SHARDINGS = ("zero1", "zero2", "zero3")
"""What a stage's ``dp_shard`` ranks may shard (``none`` is refused with dp_shard > 1, :mod:`plait.plan.rules`)."""
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
            simulate: bool = True, vary_sharding: bool = True) -> list[StageWin]:
    """The per-stage plans that beat each of ``top`` (uniform estimates) where one does, fastest first
    (``vary_sharding``: stages may shard differently, else each keeps its plan's sharding)."""
    limit = cluster.accelerator.memory_bytes * (1.0 - memory_margin)
    wins = []
    for uniform in top:
        plan = uniform.plan
        if not _eligible(plan):
            continue
        found = best_split(model, cluster, engine, plan, limit, vary_sharding)
        if found is None:
            continue
        try:
            job = Job.build(model, cluster, found, engine)
        except ConfigError:
            continue
        same = Job.build(model, cluster, plan, engine)
        closed, base = predict(job, simulate=False), predict(same, simulate=False)  # the closed forms decide
        if closed.memory.total_bytes > limit or closed.step_time_s >= base.step_time_s:
            continue
        if simulate:  # a winner and its uniform plan timed as the top plans are
            closed, base = predict(job, simulate=True), predict(same, simulate=True)
        if closed.step_time_s < base.step_time_s:
            wins.append(StageWin(uniform=base, better=closed))
    return sorted(wins, key=lambda w: -w.better.target_tokens_per_s)


def _eligible(plan: Plan) -> bool:
    """A uniform 1F1B pipeline of one chunk per rank under the all-reduce (:mod:`plait.plan.per_stage`)."""
    return (plan.pp > 1 and plan.schedule == "1f1b" and plan.vpp == 1 and plan.dp_sync.is_allreduce
            and not plan.per_stage)


def best_split(model: ModelSpec, cluster: Cluster, engine: Engine, plan: Plan, limit_bytes: float,
               vary_sharding: bool = True) -> Plan | None:
    """The per-stage plan the dynamic program finds for ``plan`` (``None``: the uniform split is the best, or
    nothing fits)."""
    p, num_layers = plan.pp, model.num_layers
    even = num_layers // p
    alike = model.moe is None and model.local_attention is None
    counts = list(range(max(1, even - LAYER_WINDOW), even + LAYER_WINDOW + 1)) if alike else [even]
    if not alike and num_layers % p:
        return None  # stages of unequal count whose layers differ by index: the even split stays
    shardings = stage_shardings(model, cluster, engine, plan) if vary_sharding else (plan.sharding,)
    choices = [(mode, z) for z in shardings for mode in MODES]  # ties go to the first: the plan's own sharding
    t = np.full((p, len(counts), len(choices)), np.inf)
    fits = np.zeros((p, len(counts), len(choices)), dtype=bool)
    tail = np.zeros(len(choices))  # the longest exposed sync + optimizer step of a stage of each choice
    for j, n in enumerate(counts):
        for k, (mode, sharding) in enumerate(choices):
            uniform = replace(plan, recompute=mode, recompute_layers=-1, sharding=sharding)
            view = stage_view(model, cluster, uniform, n, engine.framework, resized=alike)
            times = {}
            for stage in {0, 1, p - 1}:  # the first, an interior one (interior stages are alike) and the last
                fwd, bwd = stage_pass(view.model, cluster, view.prepared, stage)
                f_s = SCALAR.total(fwd.values())
                times[stage] = f_s + SCALAR.total(bwd.values())
                if j == counts.index(even):
                    tail[k] = max(tail[k], sum(stage_tail(cluster, view, stage, (fwd, bwd), f_s, times[stage],
                                                          False, engine.framework)))
            t[:, j, k] = [times[s if s in (0, p - 1) else 1] for s in range(p)]
            fits[:, j, k] = _stage_totals(view, cluster, p) <= limit_bytes
    chosen = _sharded_program(t, fits, tail, np.array(counts), num_layers, plan.num_micro_batches)
    if chosen is None:
        return None
    layers, picks = chosen
    modes = tuple(choices[k][0] for k in picks)
    shardings = tuple(choices[k][1] for k in picks)
    if len(set(picks)) == 1 and (not alike or layers == _even(num_layers, p)):
        return None  # the uniform plan (or a uniform mode and sharding the search already ranked)
    return replace(plan, recompute=modes[0], recompute_layers=-1, stage_recompute=modes, sharding=shardings[0],
                   stage_sharding=shardings if len(set(shardings)) > 1 else (),
                   stage_layers=layers if alike and layers != _even(num_layers, p) else ())


def stage_shardings(model: ModelSpec, cluster: Cluster, engine: Engine, plan: Plan) -> tuple[str, ...]:
    """The ZeRO stages a stage of ``plan`` may take, the plan's own first (ties go to it: no stage changes its
    sharding for nothing): with ``dp_shard`` ranks, each of zero1..3 whose uniform plan meets the plan rules and
    runs on ``engine``."""
    out = [plan.sharding]
    if plan.dp_shard == 1:
        return tuple(out)
    for sharding in SHARDINGS:
        uniform = replace(plan, sharding=sharding)
        if sharding != plan.sharding and first_violation(uniform, model, cluster) is None \
                and first_unsupported(uniform, model, engine) is None:
            out.append(sharding)
    return tuple(out)


def _sharded_program(t: np.ndarray, fits: np.ndarray, tail: np.ndarray, counts: np.ndarray, num_layers: int,
                     m: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """Layers and choice per stage minimising ``m max t + (p - 1) mean t + max tail``: as the program's slowest
    stage, the longest tail is enumerated (Alpa's bound, Sec. 5.2, over each choice's tail), the program run over
    the choices within it, and the least sum kept."""
    best: tuple[float, tuple[int, ...], tuple[int, ...]] | None = None
    fastest = t[fits].min(initial=np.inf)
    for bound in np.unique(tail):
        if best is not None and m * fastest + bound >= best[0]:
            break  # every later bound costs more than the best found, even with the fastest stages
        within = tail <= bound
        found = _program(t, fits & within, counts, num_layers, m, choices=len(tail))
        if found is None:
            continue
        layers, picks = found
        times = [t[s, counts.tolist().index(n), k] for s, (n, k) in enumerate(zip(layers, picks))]
        cost = m * max(times) + (t.shape[0] - 1) * sum(times) / t.shape[0] + max(tail[k] for k in picks)
        if best is None or cost < best[0]:
            best = (cost, layers, picks)
    return None if best is None else (best[1], best[2])


def _stage_totals(view: StageView, cluster: Cluster, p: int) -> np.ndarray:
    """Memory of every stage of ``view``'s uniform plan. Interior stages differ only in the micro-batches they hold
    (:func:`plait.cost.pipeline.inflight_micro_batches`, non-increasing in the stage), and their memory is affine
    in it (:func:`plait.cost.memory.stage_memory`): two interior stages give the rest."""
    prepared = view.prepared

    def memory(stage: int) -> tuple[float, float]:
        out = stage_memory(view.model, cluster.accelerator, prepared.cols, prepared.inner, stage, prepared.framework)
        return float(out["total"]), float(out["inflight"])

    totals = np.empty(p)
    totals[0], _ = memory(0)
    totals[p - 1], _ = memory(p - 1)
    if p > 2:
        (low, held_low), (high, held_high) = memory(1), memory(p - 2)
        held = np.minimum(p - np.arange(1, p - 1), prepared.cols.num_micro_batches).astype(float)
        slope = (low - high) / (held_low - held_high) if held_low != held_high else 0.0
        totals[1:p - 1] = high + (held - held_high) * slope
    return totals


def _even(num_layers: int, p: int) -> tuple[int, ...]:
    base, extra = divmod(num_layers, p)
    return tuple(base + (s < extra) for s in range(p))


def _program(t: np.ndarray, fits: np.ndarray, counts: np.ndarray, num_layers: int, m: int,
             choices: int = 0) -> tuple[tuple[int, ...], tuple[Any, ...]] | None:
    """Layers and mode per stage minimising ``m max t + (p - 1) mean t`` (module docstring), or ``None``; with
    ``choices``, the index of each stage's choice along ``t``'s last axis rather than its mode."""
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
            modes.append(int(mode_of[s, j]) if choices else MODES[int(mode_of[s, j])])
            used -= int(counts[j])
        layers.reverse()
        modes.reverse()
        times = [t[s, counts.tolist().index(n), r if choices else MODES.index(r)]
                 for s, (n, r) in enumerate(zip(layers, modes))]
        cost = m * max(times) + (p - 1) * sum(times) / p
        if best is None or cost < best[0]:
            best = (cost, tuple(layers), tuple(modes))
    return None if best is None else (best[1], best[2])
