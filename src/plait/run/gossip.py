"""Decentralized SGD (``gossip``) on ``torch.distributed``'s point-to-point sends.

After each step of the inner optimizer, a replica sends its parameters (its local shards, one flat fp32 buffer)
to every replica that receives from it, receives its sources' and takes ``sum_j W[i, j] x_j`` with the mixing
matrix of :mod:`plait.plan.gossip` for that step (D-PSGD, Lian et al. 2017, Algorithm 1, adapt-then-combine as
Koloskova et al. 2020, Algorithm 1). With ``topology=complete`` every weight is ``1/n``: the all-reduce average
of local SGD after every step. What a replica sends is :func:`plait.cost.gossip.sent_bytes`, to the byte.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from plait.plan.gossip import targets, weights
from plait.run.local import local_tensor
from plait.run.sends import Sends, global_rank, group_rank
from plait.run.sites import Reducer
from plait.run.wrapped import Wrapped
from plait.sync import Gossip as GossipMethod

TAG = 3


class Gossip(Wrapped):
    """The optimizer ``inner``, then a gossip average with the neighbours of this step (module docstring)."""

    def __init__(self, inner: torch.optim.Optimizer, sync: GossipMethod, replicas: Reducer) -> None:
        super().__init__(inner)
        self.replicas, self.steps = replicas, 0
        self.topology, self.peers = sync.topology, sync.peers
        self.local = [local_tensor(p) for g in inner.param_groups for p in g["params"]]

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[no-untyped-def,override]
        loss = self.inner.step(closure)
        self.average(self.steps)
        self.steps += 1
        return loss

    @torch.no_grad()
    def average(self, step: int) -> None:
        """Mix this replica's parameters with its sources' of ``step``."""
        n, me, replicas = self.replicas.size, group_rank(self.replicas), self.replicas
        if n <= 1:
            return
        flat = torch.cat([p.reshape(-1).to(torch.float32) for p in self.local])
        sent = [Sends.isend(flat, global_rank(replicas, j), replicas.group, TAG)
                for j in targets(self.topology, n, self.peers, step, me)]
        row = weights(self.topology, n, self.peers, step, me)  # the own copy first, then each source's
        mixed = flat * row.pop(me)
        incoming = torch.empty_like(flat)
        for j, weight in row.items():
            dist.recv(incoming, global_rank(replicas, j), group=replicas.group, tag=TAG)
            mixed += weight * incoming
        for work in sent:
            work.wait()
        for p, piece in zip(self.local, mixed.split([p.numel() for p in self.local])):
            p.copy_(piece.view_as(p))
