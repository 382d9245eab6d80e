"""``site_topk``'s DDP communication hook (:mod:`plait.sync.site_topk`): exact inside a site, top-k across sites.

Written on ``torch.distributed``'s ``reduce_scatter_tensor`` and ``all_gather_into_tensor`` (called through the
module, so that :func:`plait.run.counting.counted_bytes` counts them per group): no library compresses one tier of a
hierarchical all-reduce. One bucket (``one_bucket``): the buffer is the rank's whole gradient, reduce-scattered
over the site, its shard compressed with error feedback across sites, all-gathered back over the site.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from plait.run.sites import Reducer, SiteReducer


class SiteTopK:
    """State of :func:`site_topk_hook`: the ratio, the site groups of ``replicas`` and each parameter's residual
    (by ``id``, laid out as its gradient: DDP rebuilds its bucket after the first step, so a flat residual would
    move; only this rank's shard of it is ever non-zero)."""

    def __init__(self, ratio: float, replicas: SiteReducer) -> None:
        self.ratio, self.replicas = ratio, replicas
        self.residuals: dict[int, torch.Tensor] = {}

    def shard_residual(self, bucket, padded: int) -> torch.Tensor:  # type: ignore[no-untyped-def]
        """Every parameter's residual, flat in the bucket's order, padded to ``padded`` elements."""
        pieces = [self.residuals.setdefault(id(p), torch.zeros(g.numel(), dtype=torch.float32))
                  for p, g in zip(bucket.parameters(), bucket.gradients())]
        flat = torch.cat(pieces) if pieces else torch.zeros(0)
        return torch.nn.functional.pad(flat, (0, padded - flat.numel()))

    def exchange(self, mine: torch.Tensor, across: dist.ProcessGroup) -> torch.Tensor:
        """The sites' sum of what each sends for ``mine`` (its shard plus residual): the ``k`` largest magnitudes,
        fp32 values and int32 indices, all-gathered over ``across``; what was sent is cleared from ``mine``."""
        size = mine.numel()
        chosen = torch.topk(mine.abs(), math.ceil(self.ratio * size), sorted=False).indices
        sites = dist.get_world_size(across)
        values = torch.empty(sites * chosen.numel(), dtype=mine.dtype)
        indices = torch.empty(sites * chosen.numel(), dtype=torch.int32)
        dist.all_gather_into_tensor(values, mine[chosen].contiguous(), group=across)
        dist.all_gather_into_tensor(indices, chosen.to(torch.int32), group=across)
        total = torch.zeros(size, dtype=mine.dtype).index_add_(0, indices.to(torch.int64), values)
        mine[chosen] = 0.0
        return total

    def keep(self, bucket, flat: torch.Tensor) -> None:  # type: ignore[no-untyped-def]
        """Store ``flat`` (as :meth:`shard_residual` lays it out) back as each parameter's residual."""
        offset = 0
        for p, g in zip(bucket.parameters(), bucket.gradients()):
            self.residuals[id(p)] = flat[offset:offset + g.numel()].clone()
            offset += g.numel()


def site_topk_hook(state, bucket):  # type: ignore[no-untyped-def]
    """The bucket's mean over every replica: reduce-scatter inside the site, the site's shard plus its residual
    sent across sites by ``state.exchange`` (top-k here; :class:`plait.run.site_quantize.SiteQuantize`'s codes),
    all-gather inside the site. (Unannotated: DDP
    checks a hook's annotations against the classes themselves.)"""
    buffer = bucket.buffer()
    inside, across = state.replicas.inside, state.replicas.across
    members = dist.get_world_size(inside)
    numel = buffer.numel()
    padded = -(-numel // members) * members
    flat = torch.nn.functional.pad(buffer.reshape(-1), (0, padded - numel))
    size = padded // members
    if members > 1:
        shard = torch.empty(size, dtype=flat.dtype)
        dist.reduce_scatter_tensor(shard, flat, group=inside)
        position = dist.get_rank(inside)
    else:
        shard, position = flat.clone(), 0
    residual = state.shard_residual(bucket, padded)
    mine = residual[position * size:(position + 1) * size]
    mine += shard
    total = state.exchange(mine, across)
    state.keep(bucket, residual)
    if members > 1:
        dist.all_gather_into_tensor(flat, total, group=inside)
    else:
        flat = total
    buffer.copy_(flat[:numel].view_as(buffer) / state.replicas.size)
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    future.set_result(buffer)
    return future


def dense_mean_hook(replicas, bucket):  # type: ignore[no-untyped-def]
    """On one site ``site_topk`` is the all-reduce: the bucket's mean over the :class:`Reducer` ``replicas``."""
    buffer = bucket.buffer()
    buffer.div_(replicas.size)
    return replicas.all_reduce(buffer).then(lambda done: done.value()[0])


def site_topk_state(ratio: float, replicas: Reducer) -> tuple[object, object]:
    """(state, hook) of ``site_topk`` over ``replicas``: compressed across sites where they span several."""
    if isinstance(replicas, SiteReducer):
        return SiteTopK(ratio, replicas), site_topk_hook
    return replicas, dense_mean_hook
