"""Named pruning rules of the planner, as data.

A candidate's verdict is its first broken rule, tried in this order: the plan's own
validity rules (:data:`plait.plan.rules.RULES`), the request's constraints, dominance
(an option that can only lose to its sibling at equal cost), and finally memory, which
needs the cost model. Every candidate ends feasible-with-estimate or with one reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns
from plait.plan.convergence import convergence
from plait.plan.keys import distinct_rows
from plait.plan.rules import RULES as PLAN_RULES
from plait.plan.rules import broken_rule_index
from plait.search.space import SearchSpace
from plait.workload.model import ModelSpec

Mask = Callable[[PlanColumns, ModelSpec, Cluster, SearchSpace], np.ndarray]


def row_figures(cols: PlanColumns) -> tuple[np.ndarray, np.ndarray]:
    """(steps multiplier, whether a figure exists) per row of plan columns ``cols`` (all-reduce rows: 1, known)."""
    codes = cols["dp_sync"]
    factor, known = np.ones(len(codes)), np.ones(len(codes), dtype=bool)
    rows = np.flatnonzero(codes != 0)
    if len(rows):  # one figure per distinct (method, replicas) of the other methods' rows
        codes, sharded = codes[rows], ~cols.is_("sharding", "none")[rows]
        replicas = np.where(sharded, cols["dp_replicate"][rows], cols["dp_replicate"][rows] * cols["dp_shard"][rows])
        first, inverse = distinct_rows(codes, replicas)
        figures = [convergence(cols.methods[int(codes[i])], int(replicas[i])) for i in first]
        factor[rows] = np.array([f.factor for f in figures])[inverse]
        known[rows] = np.array([f.known for f in figures], dtype=bool)[inverse]
    return factor, known


@dataclass(frozen=True)
class PruneRule:
    """One named reason a candidate is dropped before costing."""

    name: str
    reason: str
    """Human-readable reason, shown in the report's counts."""
    broken: Mask


SEARCH_RULES: tuple[PruneRule, ...] = (
    PruneRule("tp-within-scale-up", "tensor parallelism would cross the scale-up domain",
              lambda c, m, k, s: ~np.bool_(s.allow_tp_across_nodes) & (c["tp"] > k.scale_up_domain_gpus)),
    PruneRule("ep-within-scale-up", "expert all-to-alls would cross the scale-up domain",
              lambda c, m, k, s: ~np.bool_(s.allow_tp_across_nodes) & (c["ep"] * c["tp"] > k.scale_up_domain_gpus)
              & (c["ep"] > 1)),
    PruneRule("sequence-parallel-dominates", "dominated: sequence parallelism saves memory at equal communication",
              lambda c, m, k, s: (c["tp"] > 1) & ~c["sp"] & np.bool_(True in s.sequence_parallel)),
    PruneRule("dp-sync-multiplier-known", "no steps multiplier for this synchronization method at this many "
              "replicas (plait converge measures one): its time-to-target is unknown",
              lambda c, m, k, s: ~row_figures(c)[1] if c["dp_sync"].any() else np.zeros(len(c), dtype=bool)),
    PruneRule("1f1b-dominates-gpipe", "dominated: 1F1B has GPipe's bubble with less activation memory",
              lambda c, m, k, s: c.is_("schedule", "gpipe") & (c["pp"] > 1) & np.bool_("1f1b" in s.schedules)),
)

MEMORY_REASON = "does not fit in GPU memory (with the safety margin)"
HOST_MEMORY_REASON = "swapped activations do not fit in the GPU's share of host memory"


def reason_table() -> list[str]:
    """Reason text per verdict code: plan rules, then search rules, then device and host memory."""
    return [r.name for r in PLAN_RULES] + [r.reason for r in SEARCH_RULES] + [MEMORY_REASON, HOST_MEMORY_REASON]


def prune(cols: PlanColumns, model: ModelSpec, cluster: Cluster, space: SearchSpace) -> np.ndarray:
    """Per row the verdict code of the first broken pre-costing rule (-1: go on to costing)."""
    verdict = broken_rule_index(cols, model, cluster)
    offset = len(PLAN_RULES)
    for index, rule in enumerate(SEARCH_RULES):
        mask = np.asarray(rule.broken(cols, model, cluster, space), dtype=bool) & (verdict < 0)
        verdict[mask] = offset + index
    return verdict


MEMORY_CODE = len(PLAN_RULES) + len(SEARCH_RULES)
ENGINE_CODE = MEMORY_CODE + 2
"""The first verdict code of the engine's refusals (after the two memory reasons)."""
