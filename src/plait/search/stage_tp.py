"""A tensor-parallel degree per pipeline stage (:attr:`Plan.stage_tp`) for the planner's top pipelines.

A uniform pipeline gives every stage ``t`` GPUs per replica; Alpa (Zheng et al., OSDI 2022, arXiv 2201.12023,
Sec. 5: each stage its own submesh), Galvatron (Miao et al., VLDB 2023) and Aceso (Liu et al., EuroSys 2024: moving
GPUs to the bottleneck stage) give a heavy stage more. Here the GPUs a replica holds stay ``p * t``: a pattern
moves GPUs between stages (``sum(stage_tp) = p * t``), each stage of a degree in :func:`degrees` (``t/2``,
``3t/2``, ``2t`` beside ``t``, each meeting the uniform TP rules and within the scale-up domain: a TP group that
crosses the network pays its all-reduces there). Only the stages :func:`positions` names may differ from ``t``: the ends are
where stages differ (the embedding, the output head, 1F1B's ``p - s`` micro-batches in flight); interior stages are
alike. The :data:`PATTERNS` patterns that move fewest GPUs are tried, and only where the uniform plan's stages are
unbalanced (:data:`IMBALANCE`). For each, the dynamic program of :mod:`plait.search.stage_program` picks every stage's
layers (also within :data:`plait.search.stage_program.LAYER_WINDOW` of its share by degree, ``L * d / (p * t)``),
recomputation and sharding, each stage's time and memory costed at its own degree (:mod:`plait.cost.per_stage`).
The winner is estimated exactly afterwards, with the hops between stages of different degree
(:func:`plait.cost.per_stage.boundary_p2p_s`), which the program leaves out (a constant for a uniform plan).
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np

from plait.engine.engine import Engine
from plait.hardware.cluster import Cluster
from plait.plan.plan import Plan
from plait.plan.rules import stage_violation
from plait.search.stage_dp import sharded_program
from plait.search.stage_program import (
    LAYER_WINDOW,
    Kept,
    even_layers,
    split_plan,
    stage_choices,
    stage_tables,
)
from plait.workload.model import ModelSpec

PATTERNS = 4
"""Degree patterns tried per pipeline, fewest GPUs moved first (assumed: a pattern that moves many GPUs changes the
TP efficiency of many stages and rarely beats one that moves few; each costs one program)."""
IMBALANCE = 0.02
"""Slowest stage over the mean stage, less 1, at the even split, above which patterns are tried (assumed: below 2%
the bubble and hop changes of a re-split outweigh what balancing gains)."""


def positions(p: int) -> tuple[int, ...]:
    """Stages whose degree may differ from the plan's: the first two and the last two."""
    return tuple(sorted({0, min(1, p - 1), max(p - 2, 0), p - 1}))


def degrees(model: ModelSpec, cluster: Cluster, plan: Plan) -> tuple[int, ...]:
    """The TP degrees a stage of ``plan`` may take: ``t`` and each of ``t/2``, ``3t/2``, ``2t`` that is an integer,
    within the scale-up domain, and meets the uniform rules at that degree (heads, KV heads, FFN)."""
    t = plan.tp
    out = [t]
    for twice in (t, 3 * t, 4 * t):  # twice the degree: t/2, 3t/2, 2t
        if twice % 2 == 0 and degree_fits(model, cluster, plan, twice // 2):
            out.append(twice // 2)
    return tuple(sorted(set(out)))


def degree_fits(model: ModelSpec, cluster: Cluster, plan: Plan, degree: int) -> bool:
    """``plan``'s stages may run at TP ``degree`` on ``cluster``: at least 1, within its scale-up domain, and the
    uniform rules hold at that degree (heads, KV heads, FFN)."""
    return (1 <= degree <= cluster.scale_up_domain_gpus
            and stage_violation(replace(plan, tp=degree), model, cluster) is None)


def tp_patterns(model: ModelSpec, cluster: Cluster, plan: Plan, k: int = PATTERNS) -> list[tuple[int, ...]]:
    """The ``k`` degree patterns for ``plan``'s stages that keep ``p * t`` GPUs a replica and move fewest of them."""
    p, t = plan.pp, plan.tp
    where = positions(p)
    found = []
    for picked in itertools.product(degrees(model, cluster, plan), repeat=len(where)):
        if sum(picked) != len(where) * t or set(picked) == {t}:
            continue
        pattern = [t] * p
        for s, d in zip(where, picked):
            pattern[s] = d
        found.append(tuple(pattern))
    return sorted(found, key=lambda pat: (sum(abs(d - t) for d in pat), pat))[:k]


def _even_times(t: np.ndarray, counts: list[int], num_layers: int, pick: int) -> list[float]:
    """The uniform plan's stage times: ``t`` at choice ``pick`` and the even split."""
    return [float(t[s, counts.index(n), pick]) for s, n in enumerate(even_layers(num_layers, t.shape[0]))]


def unbalanced(t: np.ndarray, counts: list[int], num_layers: int, pick: int) -> bool:
    """Whether the uniform plan's stages (``t`` at choice ``pick``, the even split) differ by more than
    :data:`IMBALANCE`."""
    even = _even_times(t, counts, num_layers, pick)
    return max(even) > (1.0 + IMBALANCE) * sum(even) / len(even)


def _uniform_cost(table: tuple[np.ndarray, np.ndarray, np.ndarray], counts: list[int], num_layers: int, pick: int,
                  m: int) -> float:
    """The program's objective of the uniform plan (``m max t + (p - 1) mean t + tail``): a pattern whose program
    costs more is not kept (the programs stop there; assumed: the objective ranks plans as the estimate does, the
    hops a pattern adds only widening its gap)."""
    even = _even_times(table[0], counts, num_layers, pick)
    return m * max(even) + (len(even) - 1) * sum(even) / len(even) + float(table[2][pick])


def tp_splits(model: ModelSpec, cluster: Cluster, engine: Engine, plan: Plan, limit_bytes: float,
              prune: bool = True, kept: Kept | None = None) -> list[Plan]:
    """For each pattern (:func:`tp_patterns`), the per-stage plan the program finds, where ``plan``'s stages are
    unbalanced; each still to be estimated (``prune``: only those whose objective beats the uniform plan's;
    ``kept``: stage cells costed already, :func:`plait.search.stage_program.stage_tables`)."""
    p, num_layers = plan.pp, model.num_layers
    alike = model.moe is None and model.local_attention is None
    patterns = tp_patterns(model, cluster, plan)
    if not patterns or (not alike and num_layers % p):
        return []  # layers placed by index: only an even split keeps every stage's layers alike
    even = num_layers // p
    shares = {d: round(even * d / plan.tp) if alike else even for pat in [(plan.tp,), *patterns] for d in pat}
    near = {d: [n for n in range(max(1, share - LAYER_WINDOW), share + LAYER_WINDOW + 1) if n <= num_layers]
            if alike else [even] for d, share in shares.items()}  # a stage of degree d holds about its share
    counts = sorted({n for window in near.values() for n in window})
    choices = stage_choices(model, cluster, engine, plan, vary_sharding=False)  # the plan's sharding: one program
    tables: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def table(d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if d not in tables:  # costed at its own counts, none elsewhere
            t_d, fits_d, tail = stage_tables(model, cluster, engine, replace(plan, tp=d), near[d], choices,
                                             limit_bytes, alike, kept)
            at = [counts.index(n) for n in near[d]]
            t = np.full((p, len(counts), len(choices)), np.inf)
            fits = np.zeros(t.shape, dtype=bool)
            t[:, at], fits[:, at] = t_d, fits_d
            tables[d] = (t, fits, tail)
        return tables[d]

    pick = choices.index((plan.recompute, plan.sharding)) if (plan.recompute, plan.sharding) in choices else 0
    if not unbalanced(table(plan.tp)[0], counts, num_layers, pick):
        return []
    ceiling = _uniform_cost(table(plan.tp), counts, num_layers, pick, plan.num_micro_batches) if prune else np.inf
    out = []
    for pattern in patterns:
        t = np.stack([table(d)[0][s] for s, d in enumerate(pattern)])
        fits = np.stack([table(d)[1][s] for s, d in enumerate(pattern)])
        tail = np.max([table(d)[2] for d in set(pattern)], axis=0)
        chosen = sharded_program(t, fits, tail, np.array(counts), num_layers, plan.num_micro_batches, ceiling)
        if chosen is not None:
            split = split_plan(plan, chosen, choices, num_layers, alike)
            out.append(replace(split, tp=pattern[0], stage_tp=pattern))
    return out
