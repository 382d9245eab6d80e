"""What a rank hands to ``torch.distributed`` while a block runs: the byte count that the cost model's synchronization
bytes (:func:`plait.cost.sync.payload_bytes`) are checked against, to the byte."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.distributed as dist

from plait.run.sites import SiteReducer


@contextlib.contextmanager
def counted_bytes(*groups: dist.ProcessGroup) -> Iterator[list[int]]:
    """Within the block, the payload bytes this rank hands to ``torch.distributed.all_reduce`` (the tensor),
    ``all_gather_into_tensor`` (its input), ``reduce_scatter_tensor`` (its input) and
    :meth:`plait.run.sends.Sends.isend` (the tensor: the point-to-point
    methods), summed into the one-element list it yields (the hooks and the averager
    call them through the module), and to a hierarchical :class:`plait.run.sites.SiteReducer`'s ``all_reduce`` (its
    buffer, once: its steps call c10d by the functions' home module), summed into the one-element list it yields.
    With ``groups``, only calls over those process groups count (a replica group's synchronization, not FSDP's
    in-replica gathers or the norm's reductions)."""
    total = [0]
    reduce, gather, site_reduce = dist.all_reduce, dist.all_gather_into_tensor, SiteReducer.all_reduce
    scatter = dist.reduce_scatter_tensor
    from plait.run.sends import Sends

    isend = Sends.isend

    def counts(given: object) -> bool:
        return not groups or None in groups or any(given is g for g in groups)  # None: the default group, all

    def counting_reduce(tensor: torch.Tensor, *args, **kwargs):  # type: ignore[no-untyped-def]
        if counts(kwargs.get("group", args[1] if len(args) > 1 else None)):  # (tensor, op, group, async_op)
            total[0] += tensor.numel() * tensor.element_size()
        return reduce(tensor, *args, **kwargs)

    def counting_gather(output: torch.Tensor, tensor: torch.Tensor, *args, **kwargs):  # type: ignore[no-untyped-def]
        if counts(kwargs.get("group", args[0] if args else None)):  # (output, input, group, async_op)
            total[0] += tensor.numel() * tensor.element_size()
        return gather(output, tensor, *args, **kwargs)

    def counting_isend(tensor: torch.Tensor, dst: int, group: dist.ProcessGroup | None, tag: int):  # type: ignore[no-untyped-def]
        if counts(group):
            total[0] += tensor.numel() * tensor.element_size()
        return isend(tensor, dst, group, tag)

    def counting_site_reduce(self: SiteReducer, flat: torch.Tensor):  # type: ignore[no-untyped-def]
        if counts(self.group):
            total[0] += flat.numel() * flat.element_size()
        return site_reduce(self, flat)

    def counting_scatter(output: torch.Tensor, tensor: torch.Tensor, *args, **kwargs):  # type: ignore[no-untyped-def]
        if counts(kwargs.get("group", args[1] if len(args) > 1 else None)):  # (output, input, op, group, async_op)
            total[0] += tensor.numel() * tensor.element_size()
        return scatter(output, tensor, *args, **kwargs)

    dist.all_reduce, dist.all_gather_into_tensor = counting_reduce, counting_gather  # type: ignore[assignment]
    dist.reduce_scatter_tensor = counting_scatter  # type: ignore[assignment]
    Sends.isend = counting_isend  # type: ignore[method-assign]
    SiteReducer.all_reduce = counting_site_reduce  # type: ignore[method-assign]
    try:
        yield total
    finally:
        dist.all_reduce, dist.all_gather_into_tensor = reduce, gather  # type: ignore[assignment]
        dist.reduce_scatter_tensor = scatter  # type: ignore[assignment]
        Sends.isend = isend  # type: ignore[method-assign]
        SiteReducer.all_reduce = site_reduce  # type: ignore[method-assign]
