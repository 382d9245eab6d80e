"""Decentralized SGD (``gossip``) on ``torch.distributed``'s point-to-point sends.

After each step of the inner optimizer, a replica sends its parameters (its local shards, one flat fp32 buffer)
to every replica that receives from it, receives its sources' and takes ``sum_j W[i, j] x_j`` with the mixing
matrix of :mod:`plait.plan.gossip` for that step (D-PSGD, Lian et al. 2017, Algorithm 1, adapt-then-combine as
Koloskova et al. 2020, Algorithm 1). With ``topology=complete`` every weight is ``1/n``: the all-reduce average
of local SGD after every step. What a replica sends is :func:`plait.cost.gossip.sent_bytes`, to the byte.

With ``delay=1`` (delay-by-one, :mod:`plait.sync.gossip`) a step ends by starting the exchange of its new
parameters ``x_{k+1}`` (isend to the targets, irecv from the sources of step ``k``'s mixing matrix) and
returns, so the next forward and backward run while the copies travel; that next step waits for them, takes its
own update ``u`` at ``x_{k+1}`` and sets ``x_{k+2} = sum_j W[i, j] x_{k+1, j} + u``. With ``topology=complete``
the replicas then evolve as ``x_{k+1, i} = mean_j x_{k, j} + u_i(x_{k, i})``: the all-reduce's average, one step
late, plus each replica's own fresh update.
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
        self.topology, self.peers, self.delay = sync.topology, sync.peers, sync.delay
        self.local = [local_tensor(p) for g in inner.param_groups for p in g["params"]]
        self.pending: _Exchange | None = None

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[no-untyped-def,override]
        if not self.delay:
            loss = self.inner.step(closure)
            self.average(self.steps)
        else:
            loss = self.delayed_step(closure)
        self.steps += 1
        return loss

    def flat(self) -> torch.Tensor:
        return torch.cat([p.reshape(-1).to(torch.float32) for p in self.local])

    def assign(self, flat: torch.Tensor) -> None:
        for p, piece in zip(self.local, flat.split([p.numel() for p in self.local])):
            p.copy_(piece.view_as(p))

    @torch.no_grad()
    def delayed_step(self, closure):  # type: ignore[no-untyped-def]
        """Delay-by-one (module docstring): mix the copies the last step sent, add this step's own update, start
        sending the result."""
        exchange, self.pending = self.pending, None
        loss = self.inner.step(closure)
        if exchange is not None:  # x_{k+1} = sum_j W[i, j] x_{k, j} + (x_k + u_k - x_k)
            self.assign(self.flat() - exchange.sent + exchange.mixed())
        if self.replicas.size > 1:
            self.pending = _Exchange.start(self, self.steps)
        return loss

    @torch.no_grad()
    def average(self, step: int) -> None:
        """Mix this replica's parameters with its sources' of ``step``."""
        n, me, replicas = self.replicas.size, group_rank(self.replicas), self.replicas
        if n <= 1:
            return
        flat = self.flat()
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
        self.assign(mixed)


class _Exchange:
    """One delay-by-one exchange in flight: the copy sent, the copies being received and their weights."""

    def __init__(self, sent: torch.Tensor, own: float, works: list[dist.Work],
                 incoming: list[tuple[float, torch.Tensor]]) -> None:
        self.sent, self.own, self.works, self.incoming = sent, own, works, incoming

    @classmethod
    def start(cls, gossip: Gossip, step: int) -> _Exchange:
        """Start sending this replica's parameters to its targets of ``step`` and receiving its sources'."""
        n, me, replicas = gossip.replicas.size, group_rank(gossip.replicas), gossip.replicas
        sent = gossip.flat()
        row = weights(gossip.topology, n, gossip.peers, step, me)
        own = row.pop(me)
        incoming = [(weight, torch.empty_like(sent)) for weight in row.values()]
        works = [dist.irecv(buffer, global_rank(replicas, j), group=replicas.group, tag=TAG)
                 for j, (_, buffer) in zip(row, incoming)]
        works += [Sends.isend(sent, global_rank(replicas, j), replicas.group, TAG)
                  for j in targets(gossip.topology, n, gossip.peers, step, me)]
        return cls(sent, own, works, incoming)  # type: ignore[arg-type]

    def wait(self) -> None:
        """Wait until every copy has been sent and received."""
        for work in self.works:
            work.wait()

    def mixed(self) -> torch.Tensor:
        """``sum_j W[i, j] x_j`` once every copy has arrived."""
        self.wait()
        out = self.sent * self.own
        for weight, copy in self.incoming:
            out += weight * copy
        return out
