"""Collectives that count the bytes this rank sends its peers (its own share, which stays home, is not counted):
what the GNN and DiT workers compare with the cost model's bytes."""

from __future__ import annotations

import torch
import torch.distributed as dist

ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
"""torch.distributed's gather into one tensor (``all_gather_single`` from 2.13; its earlier name before)."""


class Counted:
    """``all_to_all_single`` and the all-gather into one tensor, counting what leaves this rank."""

    def __init__(self) -> None:
        self.sent = 0

    def all_to_all(self, output: torch.Tensor, inputs: torch.Tensor, out_splits: list[int] | None = None,
                   in_splits: list[int] | None = None) -> None:
        """``inputs``' rows go to the ranks in order, ``in_splits`` of them to each (equal shares by default)."""
        rank, world = dist.get_rank(), dist.get_world_size()
        row_bytes = inputs[0].numel() * inputs.element_size() if inputs.numel() else 0
        rows = in_splits if in_splits is not None else [inputs.shape[0] // world] * world if inputs.dim() else []
        self.sent += sum(n for p, n in enumerate(rows) if p != rank) * row_bytes
        dist.all_to_all_single(output, inputs, out_splits, in_splits)

    def all_gather(self, output: torch.Tensor, inputs: torch.Tensor, async_op: bool = False):  # type: ignore[no-untyped-def]
        """Every rank's ``inputs`` into ``output``; this rank's go to each of the others."""
        self.sent += inputs.numel() * inputs.element_size() * (dist.get_world_size() - 1)
        return ALL_GATHER(output, inputs, async_op=async_op)
