"""Plan over a mixed cluster: layouts from the homogeneous search, each shared among device groups by speed, and
ranked against the honest baseline — the best plan on one group alone ("use only the H100s").

The search is Metis's and Sailor's in miniature (Um et al., ATC 2024; Strati et al., 2025): candidate layouts
(the homogeneous planner's best at the mixed job's size, on each group's view of the fabric), then for each
layout the work split that balances the groups:
- ``data``: each group's local batch in proportion to its replicas' speed (Poplar, Zhang et al. 2023, Sec. 4:
  per-GPU batch sizes that equalise the workers' step times), then moved one micro-batch per replica at a time
  from the slowest group while the step shortens;
- ``pipeline``: a group's stages hold layers in proportion to its devices' speed per layer (AMP, Li et al.
  2022; FlashFlex, Yan et al. 2024), then one layer at a time from the slowest stage while the step shortens;
  also with each group at its own TP degree (:mod:`plait.search.mixed_tp`).
Each data split is also tried with every group's own micro-batch and recomputation, balanced again
(:mod:`plait.search.mixed_variant`). Every candidate is costed by :func:`plait.predict.mixed.estimate_mixed`; one that does not fit some group's
memory is dropped, and so is one that ``plait run`` could not execute from its plan file
(:func:`plait.plan.mixed.run_refusal`: a layout whose replicas cannot take unequal batches keeps the even split).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from plait.cost.estimate import Estimate
from plait.engine.engine import Engine
from plait.hardware.mixed import MixedCluster, group_view
from plait.plan.columns import PlanColumns
from plait.plan.mixed import UNEVEN_BATCH_AXES, GroupShare, MixedPlan, even_shares, run_refusal, uneven_batch_refusal
from plait.plan.plan import Plan
from plait.predict.mixed_result import MixedEstimate
from plait.search.mixed_async import async_plans
from plait.search.mixed_local import local_sgd_plans
from plait.search.mixed_split import balance_data, balance_pipeline, fits_with, try_mixed
from plait.search.mixed_tier import per_tier_mixed
from plait.search.mixed_tp import group_degrees
from plait.search.mixed_variant import vary_groups
from plait.search.runner import Progress, SearchResult, run_search
from plait.search.space import default_space
from plait.workload.model import ModelSpec

ENGINE = "plait"
"""The engine a mixed plan is planned for by default: plait's runtime is the one that runs a plan over device
groups (``plait run`` of a mixed plan file, :mod:`plait.run.mixed_run`)."""
LAYOUTS = 4
"""Best homogeneous layouts taken from each group's view as candidates (more rarely changes the winner and
costs a search each)."""
MOVES = 64
"""Most single moves (a micro-batch per replica, or a layer) the balancing tries after the proportional split."""


@dataclass(frozen=True, kw_only=True)
class MixedSearch:
    """The ranked mixed plans and the homogeneous baselines."""

    plans: list[MixedEstimate]
    """Feasible mixed plans, highest all-reduce-equivalent throughput first."""
    even: MixedEstimate | None
    """The best layout with every replica on the same local batch (what a homogeneous planner would run)."""
    baselines: dict[str, Estimate]
    """Best plan on each group alone, by group name (absent: nothing fits it)."""
    per_tier: str | None = None
    """Whether compressing only a slower join between the groups wins, and why (:mod:`plait.search.mixed_tier`);
    ``None`` where the join is no slower than the groups' fabrics."""

    @property
    def best_baseline(self) -> tuple[str, Estimate] | None:
        """The fastest single group."""
        return max(self.baselines.items(), key=lambda kv: kv[1].target_tokens_per_s, default=None)


def plan_mixed(model: ModelSpec, cluster: MixedCluster, global_batch: int, *, engine: Engine,
               memory_margin: float = 0.05, local_sgd: bool = True, asynchronous: bool = True,
               progress: Progress | None = None) -> MixedSearch:
    """Mixed plans of ``model`` over every device of ``cluster`` at ``global_batch`` sequences, and baselines;
    ``local_sgd``: also each even split with per-group local steps (:mod:`plait.search.mixed_local`);
    ``asynchronous``: also each even split on asynchronous workers (:mod:`plait.search.mixed_async`); ranked by
    all-reduce-equivalent throughput (tokens/s over the measured steps multiplier). ``progress`` hears (steps done,
    steps): a search per group's view, a balancing per layout found (:data:`LAYOUTS` per group until they are
    known), a search per group's baseline."""
    n, groups = cluster.num_gpus, len(cluster.groups)
    report = progress or (lambda done, total: None)
    layouts: list[Plan] = []
    for i, group in enumerate(cluster.groups):
        report(i, 2 * groups + groups * LAYOUTS)
        view = group_view(cluster, group, n)
        space = default_space(model, view, n, (global_batch,), memory_margin=memory_margin)
        result = run_search(model, view, space, engine=engine, workers=1)
        # and the best data-parallel-only layouts of the same search: the model-parallel winners keep an even split (a
        # layout whose replicas cannot take unequal batches), which a balanced data split of another layout can beat
        for est in result.top(LAYOUTS) + _data_only(result).top(LAYOUTS):
            flat = replace(est.plan, schedule="1f1b", vpp=1)  # a pipeline split over groups takes one chunk per rank
            for layout in (est.plan, flat) if est.plan.vpp > 1 else (est.plan,):
                if layout not in layouts:
                    layouts.append(layout)
    plans, evens = [], []
    total = 2 * groups + len(layouts)
    for i, layout in enumerate(layouts):
        report(groups + i, total)
        even = _even(model, cluster, layout, engine)
        candidates = [balance_pipeline(model, cluster, layout, engine, MOVES, memory_margin)]
        candidates += [balance_pipeline(model, cluster, layout, engine, MOVES, memory_margin, degrees)
                       for degrees in group_degrees(model, cluster, layout)]  # each group its own TP degree
        if even is not None:
            balanced = even if uneven_batch_refusal(layout) else balance_data(model, cluster, even, engine, MOVES,
                                                                               memory_margin)
            candidates += [balanced, vary_groups(model, cluster, balanced, engine, 0, memory_margin),
                           vary_groups(model, cluster, even, engine, MOVES, memory_margin)]
            if fits_with(even, memory_margin):
                evens.append(even)
                if local_sgd:
                    candidates += local_sgd_plans(model, cluster, even, engine)
                if asynchronous:
                    candidates += async_plans(model, cluster, even, engine)
        plans += [c for c in candidates if c is not None and fits_with(c, memory_margin) and not run_refusal(c.plan)]
    plans = list({p.plan.describe(): p for p in reversed(plans)}.values())[::-1]  # a variant equal to a layout
    plans.sort(key=lambda e: -e.target_tokens_per_s)
    evens.sort(key=lambda e: -e.target_tokens_per_s)
    baselines = _baselines(model, cluster, global_batch, engine, memory_margin,
                           lambda i: report(groups + len(layouts) + i, total))
    per_tier = per_tier_mixed(model, cluster, evens, engine, memory_margin)
    report(total, total)
    return MixedSearch(plans=plans, even=evens[0] if evens else None, baselines=baselines, per_tier=per_tier)


def _data_only(result: SearchResult) -> SearchResult:
    """``result`` with only its feasible plans of data parallelism alone (every :data:`UNEVEN_BATCH_AXES` at 1)."""
    def kept(cols: PlanColumns, rows: np.ndarray) -> np.ndarray:
        return rows[np.logical_and.reduce([cols[axis][rows] == 1 for axis in UNEVEN_BATCH_AXES])]
    return replace(result, feasible=[(cols, batch, kept(cols, rows)) for cols, batch, rows in result.feasible],
                   _ranking=None)


def _baselines(model: ModelSpec, cluster: MixedCluster, global_batch: int, engine: Engine,
               memory_margin: float, searched: Callable[[int], None]) -> dict[str, Estimate]:
    out = {}
    for i, group in enumerate(cluster.groups):
        searched(i)
        space = default_space(model, group.cluster, group.num_gpus, (global_batch,), memory_margin=memory_margin)
        best = run_search(model, group.cluster, space, engine=engine, workers=1).top(1)
        if best:
            out[group.name] = best[0]
    return out


def _even(model: ModelSpec, cluster: MixedCluster, layout: Plan, engine: Engine) -> MixedEstimate | None:
    if layout.global_batch % layout.dp:
        return None
    shares = even_shares(layout, [GroupShare(group=g.name, num_gpus=g.num_gpus) for g in cluster.groups])
    return try_mixed(model, cluster, MixedPlan(plan=layout, split="data", shares=shares), engine)
