"""The per-tier compression the planner tries on a cluster whose replicas may span sites (:mod:`plait.sync.site_topk`,
:mod:`plait.sync.site_quantize`).

FusionLLM's rule gives the cross-site ratio from the tiers' bandwidths (:func:`plait.cost.site_sync.adaptive_ratio`)
and with it the cross-site width (:func:`plait.cost.site_sync.adaptive_bits`); the planner then takes the least ratio
(width) at or above it whose compressor has a steps multiplier (:attr:`plait.sync.SiteTopK.convergence_proxy` in
:mod:`plait.plan.convergence`), so that it never sends fewer bytes than the rule asks and never ranks a plan whose
convergence is unknown; exact (ratio 1, 32 bits) where none has one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from plait.cost.site_sync import adaptive_ratio, bits_for
from plait.hardware.cluster import Cluster
from plait.plan.convergence import convergence, table
from plait.search.runner import SearchResult
from plait.sync import SiteQuantize, SiteTopK, SyncMethod
from plait.sync.site_quantize import SITE_QUANTIZE_BITS


def adaptive_specs(cluster: Cluster, known_ratios: tuple[float, ...] | None = None) -> tuple[SyncMethod, ...]:
    """:func:`specs_for` the ratio FusionLLM's rule picks on ``cluster``; none on a cluster of one site."""
    wanted = adaptive_ratio(cluster)
    return () if wanted is None else specs_for(wanted, known_ratios)


def specs_for(wanted: float, known_ratios: tuple[float, ...] | None = None) -> tuple[SyncMethod, ...]:
    """``site_topk`` at the ratio ``wanted``, rounded up to one with a multiplier, and ``site_quantize`` at each width
    from the one the rule picks (:func:`plait.cost.site_sync.bits_for`) up to 8 bits that has a multiplier (the rule
    weighs bandwidth only; fewer bits cost more steps, which the ranking weighs), or 32 bits where none below has
    one. ``known_ratios``: the ratios to choose among (default: those whose ``site_topk`` has a figure)."""
    if known_ratios is None:  # the table's top-k ratios
        known_ratios = tuple(float(spec.partition("=")[2]) for spec in table() if spec.startswith("topk:ratio="))
    usable = sorted(r for r in known_ratios if r >= wanted and convergence(SiteTopK(ratio=r)).known)
    widths = [b for b in SITE_QUANTIZE_BITS if b >= bits_for(wanted) and convergence(SiteQuantize(bits=b)).known]
    return SiteTopK(ratio=usable[0] if usable else 1.0), *(SiteQuantize(bits=b) for b in widths[:-1] or widths)


def per_tier_verdict(bests: dict[str, Any], rule_ratio: float | None,
                     sync: Callable[[Any], SyncMethod] = lambda e: e.plan.dp_sync) -> str | None:
    """Why per-tier compression wins or not against uniform compression, DiLoCo and the all-reduce, from the best plan
    of each (``bests``: :meth:`plait.search.runner.SearchResult.best_per_method`, or the mixed planner's estimates,
    whose method ``sync`` reads); ``None`` where none was tried."""
    tried = [bests[n] for n in (SiteTopK.name, SiteQuantize.name) if n in bests]
    if not tried:
        return None
    mine = min(tried, key=lambda e: e.step_time_s * e.steps_multiplier)

    def per_step(est: Any) -> str:
        return (f"{sync(est).spec} {est.step_time_s:.3g} s/step x {est.steps_multiplier:.3g} steps = "
                f"{est.step_time_s * est.steps_multiplier:.3g} s per all-reduce step")

    rule = (f"FusionLLM's rule gives {rule_ratio:.3g}, {32 * rule_ratio:.3g} bits"
            if rule_ratio is not None else "no wide-area tier")
    others = [bests[n] for n in ("topk", "quantize", "diloco", "allreduce") if n in bests]
    text = (f"per-tier compression ({rule}; tried at the least ratio, and the fewest bits, with a steps multiplier): "
            + "; ".join(per_step(e) for e in tried))
    if others:
        text += "; against " + "; ".join(per_step(e) for e in others)
    best = min([mine, *others], key=lambda e: e.step_time_s * e.steps_multiplier)
    if best is mine:
        share = "a top-k share" if sync(mine).name == SiteTopK.name else "quantized codes"
        return text + f": {sync(mine).spec} wins, the slow tier carries {share} and the fast tiers stay exact"
    if best.step_time_s <= mine.step_time_s:
        return text + f": {sync(best).name} wins, faster per step and needing no more steps"
    return text + (f": {sync(best).name} wins, its steps multiplier ({best.steps_multiplier:.3g} against "
                   f"{mine.steps_multiplier:.3g}) outweighs a slower step")


def site_verdict(result: SearchResult) -> str | None:
    """:func:`per_tier_verdict` of a search that tried a per-tier method (``None``: it tried none)."""
    if not any(m.site_aware for m in result.space.methods):
        return None
    return per_tier_verdict(result.best_per_method(), adaptive_ratio(result.cluster))
