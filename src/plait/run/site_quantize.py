"""``site_quantize``'s DDP communication hook (:mod:`plait.sync.site_quantize`): exact inside a site, each site's
shard quantized across sites.

The hook is :func:`plait.run.site_compress.site_topk_hook` (reduce-scatter inside the site, the cross-site step,
all-gather inside); only the cross-site step differs: :func:`plait.run.compress.quantized`'s packed codes and fp32
scale all-gathered over the cross-site group, every site's dequantized and summed; at 32 bits the fp32 shard itself.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from plait.run.compress import dequantized, quantized
from plait.run.site_compress import SiteTopK, dense_mean_hook, site_topk_hook
from plait.run.sites import Reducer, SiteReducer


class SiteQuantize(SiteTopK):
    """:class:`plait.run.site_compress.SiteTopK`'s state (site groups, per-parameter residuals) with ``bits``-bit
    codes across sites in place of top-k."""

    def __init__(self, bits: int, replicas: SiteReducer) -> None:
        super().__init__(1.0, replicas)
        self.bits = bits

    def exchange(self, mine: torch.Tensor, across: dist.ProcessGroup) -> torch.Tensor:
        """The sites' sum of each one's ``mine`` quantized to :attr:`bits` (error feedback: what the codes did not
        carry stays in ``mine``); at 32 bits the exact sum, ``mine`` cleared."""
        sites, size = dist.get_world_size(across), mine.numel()
        if self.bits == 32:
            gathered = torch.empty(sites * size, dtype=mine.dtype)
            dist.all_gather_into_tensor(gathered, mine.contiguous(), group=across)
            mine.zero_()
            return gathered.reshape(sites, size).sum(0)
        packed, scale = quantized(mine, self.bits)
        codes = torch.empty(sites * packed.numel(), dtype=packed.dtype)
        scales = torch.empty(sites, dtype=scale.dtype)
        dist.all_gather_into_tensor(codes, packed, group=across)
        dist.all_gather_into_tensor(scales, scale, group=across)
        total = torch.zeros(size, dtype=mine.dtype)
        for site, chunk in enumerate(codes.chunk(sites)):
            total += dequantized(chunk, scales[site:site + 1], self.bits, size)
        mine -= dequantized(packed, scale, self.bits, size)
        return total


def site_quantize_state(bits: int, replicas: Reducer) -> tuple[object, object]:
    """(state, hook) of ``site_quantize`` over ``replicas``: quantized across sites where they span several."""
    if isinstance(replicas, SiteReducer):
        return SiteQuantize(bits, replicas), site_topk_hook
    return replicas, dense_mean_hook
