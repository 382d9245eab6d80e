"""The point-to-point sends of plait's methods (parameter servers, the emulated switch, sufficient factors,
gossip, asynchronous servers), and the ranks they address."""

from __future__ import annotations

import torch
import torch.distributed as dist

from plait.run.sites import Reducer

PUSH, PULL = 1, 2
"""Message tags of the two directions (a server is also a replica that pushes)."""


class Sends:
    """The point-to-point sends of the server and gossip methods, in one place that :func:`plait.run.counting.counted_bytes`
    counts (patching ``torch.distributed.isend`` itself would break PyTorch pipelining, whose ``P2POp`` checks the
    function's identity)."""

    @staticmethod
    def isend(tensor: torch.Tensor, dst: int, group: dist.ProcessGroup | None, tag: int) -> dist.Work:
        """Start sending ``tensor`` to global rank ``dst``."""
        return dist.isend(tensor, dst, group=group, tag=tag)  # type: ignore[return-value]


def global_rank(replicas: Reducer, rank: int) -> int:
    """The global rank of group rank ``rank`` of the replica group."""
    return rank if replicas.group is None else dist.get_global_rank(replicas.group, rank)


def group_rank(replicas: Reducer) -> int:
    """This process's rank in the replica group."""
    return dist.get_rank(replicas.group)
