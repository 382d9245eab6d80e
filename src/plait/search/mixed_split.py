"""Balancing one layout's work among device groups (:mod:`plait.search.mixed`): a split proportional to speed,
then single moves away from the slowest member while the step shortens."""

from __future__ import annotations

import math
from dataclasses import replace

from plait.cost.params import stage_layer_counts
from plait.engine.engine import Engine
from plait.errors import ConfigError
from plait.hardware.mixed import MixedCluster
from plait.plan.mixed import GroupShare, MixedPlan
from plait.plan.ops import SCALAR
from plait.plan.plan import Plan
from plait.predict.mixed import estimate_mixed
from plait.predict.mixed_result import MixedEstimate
from plait.workload.model import ModelSpec


def try_mixed(model: ModelSpec, cluster: MixedCluster, mixed: MixedPlan,
              engine: Engine) -> MixedEstimate | None:
    """:func:`estimate_mixed`, or ``None`` for a candidate the layout cannot hold (whole replicas or stages per
    group, a method the layout refuses): the search drops it."""
    try:
        return estimate_mixed(model, cluster, mixed, engine=engine)
    except ConfigError:
        return None


def _per_token_s(e: MixedEstimate) -> float:
    return e.step_time_s / e.tokens_per_step


def fits_with(e: MixedEstimate, memory_margin: float) -> bool:
    """Whether every member keeps ``memory_margin`` of its device memory free."""
    return all(g.memory_bytes <= (1.0 - memory_margin) * g.capacity_bytes for g in e.groups)


def balance_data(model: ModelSpec, cluster: MixedCluster, even: MixedEstimate, engine: Engine,
                 moves: int, memory_margin: float = 0.0) -> MixedEstimate | None:
    """Local batches in proportion to each group's sequences per second at the even split (Poplar), rounded to
    whole micro-batches per replica (each group's own micro-batch where its share gives one), then micro-batches
    moved from the slowest group to the one with most idle time (the fewest sequences that keep whole micro-batches
    on every replica of both: the least common multiple of their replicas x micro-batch) while the step shortens
    and every group keeps ``memory_margin`` free (the global batch never changes)."""
    mixed, plan = even.plan, even.plan.plan
    replicas = [s.num_gpus // plan.model_parallel for s in mixed.shares]
    units = [r * (s.micro_batch or plan.micro_batch) for s, r in zip(mixed.shares, replicas, strict=True)]
    speed = [s.batch / r / g.busy_s for s, r, g in zip(mixed.shares, replicas, even.groups, strict=True)]
    total = sum(r * v for r, v in zip(replicas, speed, strict=True))
    counts = [max(1, round(plan.global_batch * v / total * r / u))
              for v, r, u in zip(speed, replicas, units, strict=True)]
    best = _data(model, cluster, mixed, units, counts, engine)
    if best is None or not fits_with(best, memory_margin):
        best = even
    for _ in range(moves):
        counts = [s.batch // u for s, u in zip(best.plan.shares, units, strict=True)]
        slow = max(range(len(counts)), key=lambda i: best.groups[i].busy_s)
        fast = max(range(len(counts)), key=lambda i: best.groups[i].idle_s / max(replicas[i], 1))
        step = math.lcm(units[slow], units[fast])  # sequences moved: whole micro-batches on both sides
        if slow == fast or counts[slow] <= step // units[slow]:
            break
        counts[slow] -= step // units[slow]
        counts[fast] += step // units[fast]
        trial = _data(model, cluster, best.plan, units, counts, engine)
        if trial is None or _per_token_s(trial) >= _per_token_s(best) or not fits_with(trial, memory_margin):
            break
        best = trial
    return best


def _data(model: ModelSpec, cluster: MixedCluster, mixed: MixedPlan, units: list[int], counts: list[int],
          engine: Engine) -> MixedEstimate | None:
    """``mixed`` with ``counts[i]`` units of ``units[i]`` sequences (a micro-batch on each replica) on share i; the
    global batch must not change."""
    shares = [replace(s, batch=k * u) for s, u, k in zip(mixed.shares, units, counts, strict=True)]
    if sum(s.batch for s in shares) != mixed.plan.global_batch:
        return None
    return try_mixed(model, cluster, replace(mixed, shares=tuple(shares)), engine)


def balance_pipeline(model: ModelSpec, cluster: MixedCluster, layout: Plan, engine: Engine,
                     moves: int, memory_margin: float = 0.0, degrees: tuple[int, ...] = ()) -> MixedEstimate | None:
    """Stages spread over groups in proportion to their devices, layers in proportion to each stage's speed
    per layer at the even split, then one layer at a time from the slowest stage to its faster neighbour while
    the step shortens and every stage keeps ``memory_margin`` free. ``degrees``: each group's own TP degree
    (:mod:`plait.search.mixed_tp`; empty: the layout's on every group), a group of ``n`` GPUs then holding
    ``n / (degree x dp x cp)`` stages, the layout's ``pp`` their sum."""
    if layout.pp < 2 or layout.vpp != 1 or model.moe is not None:
        return None
    width = layout.dp * layout.cp
    degrees = degrees or (layout.tp,) * len(cluster.groups)
    stages = [g.num_gpus // (d * width) for g, d in zip(cluster.groups, degrees, strict=True)]
    if any(s * d * width != g.num_gpus for s, d, g in zip(stages, degrees, cluster.groups, strict=True)):
        return None
    if len(set(degrees)) > 1:
        stage_tp = tuple(d for d, k in zip(degrees, stages, strict=True) for _ in range(k))
        if len(stage_tp) < 2:
            return None
        layout = replace(layout, tp=stage_tp[0], pp=len(stage_tp), stage_tp=stage_tp)
    if sum(stages) != layout.pp:
        return None
    layers = [sum(stage_layer_counts(model, layout.pp, stage, SCALAR)) for stage in range(layout.pp)]  # the even split
    even = _pipe(model, cluster, layout, stages, layers, engine)
    if even is None:
        return None
    rate = [n / g.busy_s for n, g in zip(layers, even.groups, strict=True)]
    share = [max(1, round(model.num_layers * r / sum(rate))) for r in rate]
    share[-1] += model.num_layers - sum(share)
    best = _pipe(model, cluster, layout, stages, share, engine) if min(share) > 0 else None
    if best is None or not fits_with(best, memory_margin):
        best = even
    for _ in range(moves):
        counts = [int(w.split()[0]) for w in (g.work for g in best.groups)]
        slow = max(range(len(counts)), key=lambda i: best.groups[i].busy_s)
        neighbours = [i for i in (slow - 1, slow + 1) if 0 <= i < len(counts)]
        fast = max(neighbours, key=lambda i: best.groups[i].idle_s)
        if counts[slow] <= 1:
            break
        counts[slow] -= 1
        counts[fast] += 1
        trial = _pipe(model, cluster, layout, stages, counts, engine)
        if trial is None or trial.step_time_s >= best.step_time_s or not fits_with(trial, memory_margin):
            break
        best = trial
    return best


def _pipe(model: ModelSpec, cluster: MixedCluster, layout: Plan, stages: list[int], layers: list[int],
          engine: Engine) -> MixedEstimate | None:
    shares, at = [], 0
    for group, k in zip(cluster.groups, stages, strict=True):
        if k:
            degree = layout.stage_tp[at] if layout.stage_tp else layout.tp
            shares.append(GroupShare(group=group.name, num_gpus=k * degree * layout.dp * layout.cp,
                                     layers=tuple(layers[at:at + k])))
        at += k
    return try_mixed(model, cluster, MixedPlan(plan=layout, split="pipeline", shares=tuple(shares)), engine)
