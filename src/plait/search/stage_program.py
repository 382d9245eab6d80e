"""The dynamic program behind per-stage plans (:mod:`plait.search.per_stage`): layers, recomputation and sharding
per stage.

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
micro-batches). Complexity per plan: ``3 W C`` stage passes and ``4 W C`` stage memories (``W`` layer counts,
``C = 3 Z`` choices of ``R = 3`` modes by ``Z <= 3`` shardings; interior stages' memory is affine in what they hold),
each stage cell costed once per pass (:data:`Kept`, shared with the TP patterns of :mod:`plait.search.stage_tp`),
then ``O(|U| |T| p W L)`` for the programs of :mod:`plait.search.stage_dp` (``|U| <= C``, ``|T| <= 3 W C``, ``L``
layers), vectorized over bounds, ``W`` and ``L``; both bounds stop once the busy term alone costs more than the
best found. The winner is then estimated as any plan is (:func:`plait.predict.estimate.
assemble`, simulated where the top plans are) and kept only where it beats the uniform plan it came from.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from plait.cost.batch import stage_pass
from plait.cost.memory import stage_memory
from plait.cost.per_stage import StageView, stage_tail, stage_view
from plait.engine.capability import first_unsupported
from plait.engine.engine import Engine
from plait.hardware.cluster import Cluster
from plait.plan.ops import SCALAR
from plait.plan.plan import Plan
from plait.plan.rules import first_violation
from plait.search.stage_dp import MODES, sharded_program
from plait.workload.model import ModelSpec

SHARDINGS = ("zero1", "zero2", "zero3")
"""What a stage's ``dp_shard`` ranks may shard (``none`` is refused with dp_shard > 1, :mod:`plait.plan.rules`)."""
LAYER_WINDOW = 3
"""Layers a stage may hold beyond or short of the even split (assumed: the memory a stage frees by recomputing
pays for a few layers, not for many; a wider window widens the program linearly)."""
def best_split(model: ModelSpec, cluster: Cluster, engine: Engine, plan: Plan, limit_bytes: float,
               vary_sharding: bool = True, kept: Kept | None = None) -> Plan | None:
    """The per-stage plan the dynamic program finds for ``plan`` (``None``: the uniform split is the best, or
    nothing fits; ``kept``: see :func:`stage_tables`)."""
    p, num_layers = plan.pp, model.num_layers
    even = num_layers // p
    alike = model.moe is None and model.local_attention is None
    counts = list(range(max(1, even - LAYER_WINDOW), even + LAYER_WINDOW + 1)) if alike else [even]
    if not alike and num_layers % p:
        return None  # stages of unequal count whose layers differ by index: the even split stays
    choices = stage_choices(model, cluster, engine, plan, vary_sharding)
    t, fits, tail = stage_tables(model, cluster, engine, plan, counts, choices, limit_bytes, alike, kept)
    chosen = sharded_program(t, fits, tail, np.array(counts), num_layers, plan.num_micro_batches)
    if chosen is None:
        return None
    if len(set(chosen[1])) == 1 and (not alike or chosen[0] == even_layers(num_layers, p)):
        return None  # the uniform plan (or a uniform mode and sharding the search already ranked)
    return split_plan(plan, chosen, choices, num_layers, alike)


def stage_choices(model: ModelSpec, cluster: Cluster, engine: Engine, plan: Plan,
                  vary_sharding: bool = True) -> list[tuple[str, str]]:
    """Every (mode, sharding) a stage may take; ties go to the first: the plan's own sharding."""
    shardings = stage_shardings(model, cluster, engine, plan) if vary_sharding else (plan.sharding,)
    return [(mode, z) for z in shardings for mode in MODES]


Kept = dict[Any, Any]
"""What the per-stage pass costs once and reuses across the programs of one :func:`plait.search.per_stage.improve`
(one model, cluster, engine and memory limit): each resized model by its layer total, kept so that
:func:`plait.cost.inner.inner_columns` finds the per-layer values of plans alike in the fields it reads, and each
stage cell (a uniform plan at a layer count) with its stage times, memories and tail."""


def stage_tables(model: ModelSpec, cluster: Cluster, engine: Engine, plan: Plan, counts: list[int],
                 choices: list[tuple[str, str]], limit_bytes: float, alike: bool,
                 kept: Kept | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``t`` (stage, layer count, choice): a stage's forward and backward per micro-batch; whether it fits; and
    each choice's tail (its longest exposed sync and optimizer step, at the even count or, where ``counts`` lacks
    it, their middle one), for stages of ``plan``'s TP degree (``kept``: cells costed already, filled with the new
    ones)."""
    p, even = plan.pp, model.num_layers // plan.pp
    kept = {} if kept is None else kept
    tail_at = even if even in counts else counts[len(counts) // 2]  # the even count, or the middle of the window
    t = np.full((p, len(counts), len(choices)), np.inf)
    fits = np.zeros((p, len(counts), len(choices)), dtype=bool)
    tail = np.zeros(len(choices))  # the longest exposed sync + optimizer step of a stage of each choice
    for j, n in enumerate(counts):
        for k, (mode, sharding) in enumerate(choices):
            uniform = replace(plan, recompute=mode, recompute_layers=-1, sharding=sharding)
            cell = kept.get((uniform, n))
            if cell is None:
                if alike and ("model", n * p) not in kept:
                    kept["model", n * p] = replace(model, num_layers=n * p)
                view = stage_view(kept["model", n * p] if alike else model, cluster, uniform, n, engine.framework,
                                  resized=False)  # resized already where alike
                cell = kept[uniform, n] = _Cell(view, cluster, engine, p)
            t[:, j, k] = cell.times
            fits[:, j, k] = cell.totals <= limit_bytes
            if n == tail_at:
                tail[k] = cell.tail()
    return t, fits, tail


class _Cell:
    """One stage cell of :func:`stage_tables`: a uniform plan's stage of some layer count, its time per micro-batch
    at every stage (the first, an interior one, interior stages being alike, and the last), its memory at every
    stage, and its tail where asked (the longest of those three stages')."""

    def __init__(self, view: StageView, cluster: Cluster, engine: Engine, p: int) -> None:
        self.view, self.cluster, self.framework = view, cluster, engine.framework
        self.passes: dict[int, tuple[Any, Any, float, float]] = {}
        for stage in {0, 1, p - 1}:
            fwd, bwd = stage_pass(view.model, cluster, view.prepared, stage)
            f_s = SCALAR.total(fwd.values())
            self.passes[stage] = (fwd, bwd, f_s, f_s + SCALAR.total(bwd.values()))
        self.times = [self.passes[s if s in (0, p - 1) else 1][3] for s in range(p)]
        self.totals = _stage_totals(view, cluster, p)
        self._tail: float | None = None

    def tail(self) -> float:
        """The longest exposed sync + optimizer step of the three stages costed (0 at least)."""
        if self._tail is None:
            self._tail = 0.0
            for stage, (fwd, bwd, f_s, total_s) in self.passes.items():
                self._tail = max(self._tail, sum(stage_tail(self.cluster, self.view, stage, (fwd, bwd), f_s, total_s,
                                                            False, self.framework)))
        return self._tail


def split_plan(plan: Plan, chosen: tuple[tuple[int, ...], tuple[int, ...]], choices: list[tuple[str, str]],
               num_layers: int, alike: bool) -> Plan:
    """``plan`` with the program's layers and choice per stage."""
    layers, picks = chosen
    modes = tuple(choices[k][0] for k in picks)
    shardings = tuple(choices[k][1] for k in picks)
    return replace(plan, recompute=modes[0], recompute_layers=-1, stage_recompute=modes, sharding=shardings[0],
                   stage_sharding=shardings if len(set(shardings)) > 1 else (),
                   stage_layers=layers if alike and layers != even_layers(num_layers, plan.pp) else ())


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


def even_layers(num_layers: int, p: int) -> tuple[int, ...]:
    """Layers of each of ``p`` stages in the even split, the first stages taking the remainder."""
    base, extra = divmod(num_layers, p)
    return tuple(base + (s < extra) for s in range(p))
