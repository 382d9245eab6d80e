"""Per-tier compression: exact inside a site, top-k across sites (FusionLLM's AdaTopK, Tang et al. 2024).

FusionLLM (arXiv 2410.12707, abstract and the AdaTopK section) compresses only on the slowest links and keeps full
precision on the fast ones, choosing the top-k ratio from the links' bandwidths. ``site_topk:ratio=F`` applies that
to plait's hierarchical all-reduce across sites (Jia et al. 2018, arXiv 1807.11205, Sec. 4.3;
:mod:`plait.run.sites`), which crosses the slow tier once:

1. inside each site of ``m`` replicas, an exact fp32 reduce-scatter of the gradient buffer (padded to a multiple of
   ``m``): each member holds the site's sum of one shard;
2. across the ``S`` sites, each member adds its error-feedback residual (Stich et al. 2018) and all-gathers with the
   members at its position in the other sites the ``k = ceil(F shard)`` largest magnitudes of its shard, fp32 values
   and int32 indices (Lin et al. 2018, DGC), sums them, and clears what it sent from its residual;
3. inside each site, an exact all-gather of the shards; the buffer becomes the mean over all ``S m`` replicas.

On one site (no wide-area tier in the group) it is the plain all-reduce. Bytes each rank hands to collectives, per
tier (:meth:`SiteTopK.site_payload_bytes`): inside, ``4 P`` to the reduce-scatter and ``4 P / m`` to the all-gather
(``P``: the padded buffer's elements); across, ``8 k``. At ``F = 1`` every element is sent and the result is the
all-reduce's. The ratio the planner gives it is FusionLLM's rule, :func:`plait.cost.site_sync.adaptive_ratio`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from plait.sync.allreduce import AllReduce
from plait.sync.base import GRAD_BYTES, SyncMethod, elements_of, number
from plait.sync.sparse import TOPK_PASSES, TopK

if TYPE_CHECKING:
    from plait.sync.hooks import Costs, GradientHooks, Pricing, R
    from plait.workload.tensors import Shape


@dataclass(frozen=True, kw_only=True)
class PerTierMethod(SyncMethod):
    """Exact inside each site, a method's own pieces across sites: what ``site_topk`` and ``site_quantize`` share
    (their bytes per tier by :func:`site_tier_bytes`, their step priced by ``Pricing.site_costs``)."""

    compressed: ClassVar[bool] = True
    one_bucket: ClassVar[bool] = True
    site_aware: ClassVar[bool] = True

    def cross_site_pieces(self, shard: int) -> tuple[float, ...]:
        """Bytes one rank hands to each cross-site all-gather for its ``shard`` elements."""
        raise NotImplementedError

    def cross_site_passes(self, sites: int) -> int:
        """Streaming passes over the shard across sites."""
        raise NotImplementedError

    def site_payload_bytes(self, elements: int, members: int, sites: int) -> tuple[float, float]:
        """(bytes handed to collectives inside the site, bytes handed to the cross-site all-gathers) by one rank whose
        gradient buffer has ``elements`` fp32 values, in a replica group of ``sites`` sites of ``members`` each."""
        return site_tier_bytes(self, elements, members, sites)

    def step_payload_bytes(self, shapes: list[Shape], step: int | None) -> float:
        """On one site (what a replica count alone says): the all-reduce's buffer."""
        return float(elements_of(shapes) * GRAD_BYTES)

    def step_costs(self, price: Pricing) -> Costs:
        return price.site_costs(self)


@dataclass(frozen=True, kw_only=True)
class SiteTopK(PerTierMethod):
    """``site_topk:ratio=F``: exact inside each site, the largest fraction F of each shard across sites."""

    name: ClassVar[str] = "site_topk"

    ratio: float = number(None, 1e-9, 1.0, False)
    """The fraction of each site-summed shard's elements sent across sites."""

    @property
    def convergence_proxy(self) -> SyncMethod:
        """The all-reduce at ratio 1 (every element sent: the same sum); else ``topk`` at the same ratio, the
        compressor of the cross-site step, where the table has no figure of this method's own (assumed: top-k of
        site-summed shards needs about as many steps as top-k of every replica's gradient; at 0.01 on 4 ranks in 2
        sites of 2, measured 2.58 against topk's 2.49 on the same ranks: within a 300-step measurement's +-8%)."""
        return AllReduce() if self.ratio >= 1.0 else TopK(ratio=self.ratio)

    def cross_site_pieces(self, shard: int) -> tuple[float, ...]:
        """Bytes one rank hands to each cross-site all-gather for its ``shard`` elements: fp32 values, int32
        indices."""
        kept = math.ceil(self.ratio * shard)
        return 4.0 * kept, 4.0 * kept

    def cross_site_passes(self, sites: int) -> int:
        """Streaming passes over the shard (:data:`plait.sync.sparse.TOPK_PASSES`)."""
        return TOPK_PASSES

    def comm_hook(self, hooks: GradientHooks[R]) -> R:
        return hooks.site_topk(self)


def site_tier_bytes(method: SyncMethod, elements: int, members: int, sites: int) -> tuple[float, float]:
    """(inside, across) bytes one rank of a per-tier method hands to collectives: on one site the all-reduce's
    buffer; else ``4 P`` to the site's reduce-scatter and ``4 P / m`` to its all-gather (none for ``m = 1``), and the
    method's :meth:`cross_site_pieces` of its ``P / m`` shard across."""
    if sites <= 1:
        return float(elements * GRAD_BYTES), 0.0  # the plain all-reduce
    padded = -(-elements // members) * members
    shard = padded // members
    inside = 0.0 if members == 1 else float((padded + shard) * GRAD_BYTES)
    return inside, sum(method.cross_site_pieces(shard))  # type: ignore[attr-defined]
