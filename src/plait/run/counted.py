"""Collectives that count the bytes this rank sends its peers (its own share, which stays home, is not counted):
what the GNN and DiT workers compare with the cost model's bytes. Each takes an optional process group (default:
every rank)."""

from __future__ import annotations

import torch
import torch.distributed as dist

ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
"""torch.distributed's gather into one tensor (``all_gather_single`` from 2.13; its earlier name before)."""


class Counted:
    """``all_to_all_single``, the all-gather into one tensor, an all-reduce and point-to-point sends, counting
    what leaves this rank."""

    def __init__(self) -> None:
        self.sent = 0

    def all_to_all(self, output: torch.Tensor, inputs: torch.Tensor, out_splits: list[int] | None = None,
                   in_splits: list[int] | None = None, group: dist.ProcessGroup | None = None) -> None:
        """``inputs``' rows go to the ranks in order, ``in_splits`` of them to each (equal shares by default)."""
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        row_bytes = inputs[0].numel() * inputs.element_size() if inputs.numel() else 0
        rows = in_splits if in_splits is not None else [inputs.shape[0] // world] * world if inputs.dim() else []
        self.sent += sum(n for p, n in enumerate(rows) if p != rank) * row_bytes
        dist.all_to_all_single(output, inputs, out_splits, in_splits, group=group)

    def all_gather(self, output: torch.Tensor, inputs: torch.Tensor, async_op: bool = False,
                   group: dist.ProcessGroup | None = None):  # type: ignore[no-untyped-def]
        """Every rank's ``inputs`` into ``output``; this rank's go to each of the others."""
        self.sent += inputs.numel() * inputs.element_size() * (dist.get_world_size(group) - 1)
        return ALL_GATHER(output, inputs, async_op=async_op, group=group)

    def all_reduce(self, x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
        """The sum over the group's ranks, as a reduce-scatter (an all-to-all of ``1 / W`` shares, each rank summing
        the share it owns) and an all-gather of the sums: the bandwidth-optimal all-reduce (Patarasuk & Yuan, JPDC
        2009; Thakur et al., IJHPCA 2005, Sec. 4), written out so that its bytes are the ones counted, ``2 (W - 1) /
        W`` of the tensor (gloo's own all-reduce picks its algorithm internally). ``x.numel()`` must divide by W."""
        world = dist.get_world_size(group)
        flat = x.contiguous().view(world, -1)
        got = torch.empty_like(flat)
        self.all_to_all(got, flat, group=group)
        owned = got.sum(dim=0)
        whole = torch.empty_like(flat)
        self.all_gather(whole.view(-1), owned, group=group)
        return whole.view(x.shape)

    def isend(self, x: torch.Tensor, to: int) -> dist.Work:
        """``x`` (kept unchanged until the returned work is waited for) to global rank ``to``."""
        self.sent += x.numel() * x.element_size()
        return dist.isend(x, to)
