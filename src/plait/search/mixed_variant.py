"""Each group's own micro-batch and recomputation in a mixed data split (:mod:`plait.search.mixed`).

One layout's replicas all-reduce the same gradients whatever micro-batch each accumulates over and whatever it
recomputes: gradient accumulation sums the same per-sequence gradients (up to float rounding), and recomputation
re-runs the same forward (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost", Sec. 3). So each
group of a data split may run its own variant of the layout — a 32 GB V100 full recomputation or micro-batch 1
where an 80 GB A100 needs neither — as heterogeneity-aware planners choose per-device-type configurations (Sailor,
Strati et al. 2025, Sec. 4; Metis, Um et al. ATC 2024, Sec. 5). Per group, the variants are the micro-batches that
divide its replicas' local batch and the three recomputation modes; each is costed on the group's own job
(:func:`plait.predict.mixed.group_estimate`) and the fastest that keeps the memory margin free is kept. The planner
varies the balanced split at its batches, and the even split before balancing it again with the groups' variants
(:func:`plait.search.mixed_split.balance_data`; a layout that fits no group uniformly has no balanced split).

Runnable where ``plait run`` gives each rank its own micro-batch and recomputation: layouts of data parallelism
alone (:func:`plait.plan.mixed.uneven_batch_refusal`), with the all-reduce or local SGD.
"""

from __future__ import annotations

from dataclasses import replace
from typing import get_args

from plait.engine.engine import Engine
from plait.errors import ConfigError
from plait.hardware.mixed import MixedCluster
from plait.plan.mixed import GroupShare, MixedPlan, share_layout, uneven_batch_refusal
from plait.plan.plan import Plan, Recompute
from plait.predict.mixed import group_estimate
from plait.predict.mixed_result import MixedEstimate
from plait.search.mixed_split import balance_data, try_mixed
from plait.workload.model import ModelSpec

MODES: tuple[Recompute, ...] = get_args(Recompute)
"""Recomputation modes a group may take (every layer of a mode)."""


def micro_batches(local: int) -> tuple[int, ...]:
    """Micro-batches a replica of ``local`` sequences may take: the powers of two that divide it, and ``local``."""
    out, mb = [], 1
    while mb <= local:
        if local % mb == 0:
            out.append(mb)
        mb *= 2
    return tuple(out) + ((local,) if local not in out else ())


def group_variant(model: ModelSpec, cluster: MixedCluster, mixed: MixedPlan, share: GroupShare, engine: Engine,
                  memory_margin: float) -> GroupShare | None:
    """``share`` with the fastest micro-batch and recomputation for its group that keeps ``memory_margin`` of its
    devices free (the layout's own, written as 0 and '', where that is fastest); ``None`` where none fits."""
    layout = mixed.plan
    local = share.batch // (share.num_gpus // layout.model_parallel)
    best: tuple[float, GroupShare] | None = None
    for mb in micro_batches(local):
        for mode in MODES:
            own = replace(share, micro_batch=0 if mb == layout.micro_batch else mb,
                          recompute="" if _same_mode(layout, mode) else mode)
            try:
                est = group_estimate(model, cluster, mixed, own, engine)
            except ConfigError:
                continue
            if est.memory.total_bytes > (1.0 - memory_margin) * est.memory.capacity_bytes:
                continue
            if best is None or est.step_time_s < best[0]:
                best = (est.step_time_s, own)
    return None if best is None else best[1]


def canonical(mixed: MixedPlan) -> MixedPlan:
    """``mixed`` written one way: the layout is the first group's variant and every other group states only where it
    differs, so one plan reached from two layouts (``mb1`` with a group at ``mb6``, ``mb6`` with a group at ``mb1``)
    is ranked once. A layout recomputing only some layers stays as it is (a group cannot state that)."""
    layout = mixed.plan
    if layout.recompute == "full" and layout.recompute_layers >= 0:
        return mixed
    plans = [share_layout(layout, s) for s in mixed.shares]
    first = plans[0]
    shares = tuple(replace(s, micro_batch=0 if p.micro_batch == first.micro_batch else p.micro_batch,
                           recompute="" if p.recompute == first.recompute else p.recompute)
                   for s, p in zip(mixed.shares, plans, strict=True))
    return replace(mixed, plan=first, shares=shares)


def _same_mode(layout: Plan, mode: Recompute) -> bool:
    """Whether ``mode`` on every layer is what ``layout`` already runs."""
    return mode == layout.recompute and (mode != "full" or layout.recompute_layers < 0)


def vary_groups(model: ModelSpec, cluster: MixedCluster, candidate: MixedEstimate | None, engine: Engine,
                moves: int, memory_margin: float) -> MixedEstimate | None:
    """``candidate`` (a data split, fitting or not) with each group's fastest fitting variant at its batch, then
    balanced again with ``moves`` (0: the batches kept); ``None`` where the layout cannot run per-group variants,
    some group has no variant that fits, or every group's best is the layout itself (the uniform candidate is
    ranked already); written in :func:`canonical` form."""
    if candidate is None:
        return None
    mixed = candidate.plan
    layout = mixed.plan
    if mixed.split != "data" or uneven_batch_refusal(layout) or layout.dp_sync.asynchronous:
        return None
    shares = []
    for share in mixed.shares:
        own = group_variant(model, cluster, mixed, share, engine, memory_margin)
        if own is None:
            return None
        shares.append(own)
    if all(not s.varies for s in shares):
        return None
    estimate = try_mixed(model, cluster, canonical(replace(mixed, shares=tuple(shares))), engine)
    if estimate is None or not moves:
        return estimate
    return balance_data(model, cluster, estimate, engine, moves, memory_margin)
