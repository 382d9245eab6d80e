"""Per-tier quantization: exact inside a site, each site's shard quantized to ``bits`` across sites.

The same three steps as :mod:`plait.sync.site_topk` (Jia et al. 2018's hierarchical all-reduce, arXiv 1807.11205,
Sec. 4.3: reduce-scatter inside each site of ``m`` replicas, the shards combined across the ``S`` sites, all-gather
inside), with the cross-site step of plait's ``quantize`` compressor (:mod:`plait.sync.sparse`,
:func:`plait.run.compress.quantized`) in place of top-k: each member adds its error-feedback residual (Stich et al.
2018) to its site-summed shard, quantizes it to ``bits`` with one fp32 scale (8 and 4 bits: the nearest of
``2^(b-1) - 1`` symmetric levels of ``max |x|``; 1 bit: EF-SignSGD's scaled sign, Karimireddy et al. 2019), and
all-gathers codes and scale with the members at its position in the other sites, which dequantize and sum them.
``bits=32`` sends the fp32 shard itself: the all-reduce's sum (FusionLLM keeps full precision where the links are
fast, Tang et al. 2024, arXiv 2410.12707; here where the rule finds the slow tier fast enough).

Bytes each rank hands to collectives, per tier (:meth:`SiteQuantize.site_payload_bytes`): inside ``4 P`` and
``4 P / m`` as ``site_topk``; across ``ceil(b P / (8 m)) + 4`` (``4 P / m`` at 32 bits). The width the planner gives
it follows from the tiers' bandwidths, :func:`plait.cost.site_sync.adaptive_bits`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from plait.sync.allreduce import AllReduce
from plait.sync.base import GRAD_BYTES, SyncMethod, number
from plait.sync.site_topk import PerTierMethod
from plait.sync.sparse import QUANTIZE_BITS, QUANTIZE_PASSES, Quantize

if TYPE_CHECKING:
    from plait.sync.hooks import GradientHooks, R

SITE_QUANTIZE_BITS = (*QUANTIZE_BITS, 32)
"""The widths of the cross-site step: those ``quantize`` packs, and 32 (the fp32 shard, uncompressed)."""
FP32_PASSES = 5
"""Streaming passes over the shard at 32 bits besides one per gathered site: the residual add (3), clearing it (1),
the copy into the buffer (1)."""


@dataclass(frozen=True, kw_only=True)
class SiteQuantize(PerTierMethod):
    """``site_quantize:bits=B``: exact inside each site, each site's shard quantized to B bits across sites."""

    name: ClassVar[str] = "site_quantize"

    bits: int = number(None, 1, 32, True)
    """Bits per element sent across sites: one of :data:`SITE_QUANTIZE_BITS`."""

    def problem(self) -> str | None:
        if self.bits not in SITE_QUANTIZE_BITS:
            return f"bits must be one of {', '.join(map(str, SITE_QUANTIZE_BITS))}"
        return None

    @property
    def convergence_proxy(self) -> SyncMethod:
        """The all-reduce at 32 bits (the same sum); else ``quantize`` at the same width, the compressor of the
        cross-site step, where the table has no figure of this method's own (assumed, as ``site_topk`` takes
        ``topk``'s: quantizing site-summed shards needs about as many steps as quantizing every replica's gradient)."""
        return AllReduce() if self.bits == 32 else Quantize(bits=self.bits)

    def cross_site_pieces(self, shard: int) -> tuple[float, ...]:
        """Bytes one rank hands to each cross-site all-gather for its ``shard`` elements: packed codes and the fp32
        scale; at 32 bits the fp32 shard alone."""
        if self.bits == 32:
            return (float(shard * GRAD_BYTES),)
        return float(math.ceil(self.bits * shard / 8)), 4.0

    def cross_site_passes(self, sites: int) -> int:
        """Streaming passes over the shard: ``quantize``'s (:data:`plait.sync.sparse.QUANTIZE_PASSES`) plus two per
        site's codes dequantized and added; at 32 bits :data:`FP32_PASSES` plus one per site."""
        return FP32_PASSES + sites if self.bits == 32 else QUANTIZE_PASSES + 2 * sites

    def comm_hook(self, hooks: GradientHooks[R]) -> R:
        return hooks.site_quantize(self)
