"""The per-tier compression the planner tries on a cluster whose replicas may span sites (:mod:`plait.sync.site_topk`).

FusionLLM's rule gives the cross-site ratio from the tiers' bandwidths (:func:`plait.cost.site_sync.adaptive_ratio`);
the planner then takes the least ratio at or above it whose compressor has a steps multiplier
(:attr:`plait.sync.SiteTopK.convergence_proxy` in :mod:`plait.plan.convergence`), so that it never sends fewer bytes
than the rule asks and never ranks a plan whose convergence is unknown; ratio 1 (exact) where none has one.
"""

from __future__ import annotations

from plait.cost.estimate import Estimate
from plait.cost.site_sync import adaptive_ratio
from plait.hardware.cluster import Cluster
from plait.plan.convergence import convergence, table
from plait.search.runner import SearchResult
from plait.sync import SiteTopK, SyncMethod


def adaptive_specs(cluster: Cluster, known_ratios: tuple[float, ...] | None = None) -> tuple[SyncMethod, ...]:
    """``site_topk`` at the ratio the rule picks on ``cluster``, rounded up to a ratio with a multiplier; none on a
    cluster of one site. ``known_ratios``: the ratios to choose among (default: those whose ``site_topk`` has a
    figure)."""
    wanted = adaptive_ratio(cluster)
    if wanted is None:
        return ()
    if known_ratios is None:  # the table's top-k ratios
        known_ratios = tuple(float(spec.partition("=")[2]) for spec in table() if spec.startswith("topk:ratio="))
    usable = sorted(r for r in known_ratios if r >= wanted and convergence(SiteTopK(ratio=r)).known)
    return (SiteTopK(ratio=usable[0] if usable else 1.0),)


def per_tier_verdict(bests: dict[str, Estimate], rule_ratio: float | None) -> str | None:
    """Why per-tier compression wins or not against uniform compression, DiLoCo and the all-reduce, from the best plan
    of each (``bests``: :meth:`plait.search.runner.SearchResult.best_per_method`); ``None`` where none was tried."""
    mine = bests.get(SiteTopK.name)
    if mine is None:
        return None

    def per_step(est: Estimate) -> str:
        return (f"{est.plan.dp_sync.spec} {est.step_time_s:.3g} s/step x {est.steps_multiplier:.3g} steps = "
                f"{est.step_time_s * est.steps_multiplier:.3g} s per all-reduce step")

    rule = f"FusionLLM's rule gives {rule_ratio:.3g}" if rule_ratio is not None else "no wide-area tier"
    others = [bests[n] for n in ("topk", "diloco", "allreduce") if n in bests]
    text = f"per-tier compression ({rule}; tried at the least ratio with a steps multiplier): {per_step(mine)}"
    if others:
        text += "; against " + "; ".join(per_step(e) for e in others)
    best = min([mine, *others], key=lambda e: e.step_time_s * e.steps_multiplier)
    if best is mine:
        return text + ": it wins, the slow tier carries a top-k share and the fast tiers stay exact"
    if best.step_time_s <= mine.step_time_s:
        return text + f": {best.plan.dp_sync.name} wins, faster per step and needing no more steps"
    return text + (f": {best.plan.dp_sync.name} wins, its steps multiplier ({best.steps_multiplier:.3g} against "
                   f"{mine.steps_multiplier:.3g}) outweighs a slower step")


def site_verdict(result: SearchResult) -> str | None:
    """:func:`per_tier_verdict` of a search that tried a per-tier method (``None``: it tried none)."""
    if not any(m.site_aware for m in result.space.methods):
        return None
    return per_tier_verdict(result.best_per_method(), adaptive_ratio(result.cluster))
