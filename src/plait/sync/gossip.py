"""Decentralized SGD: after each step a replica averages its parameters with its neighbours' (D-PSGD, Lian et al.
NeurIPS 2017; the topologies in :mod:`plait.plan.gossip`).

``delay=1`` is the delay-by-one scheme (Zhang, Cui et al., ICASSP 2020, arXiv 2002.01119, and arXiv 2110.11199,
abstracts: it lets the neighbour exchange run beside the next step's computation): the replica sends its
parameters when its step ends and takes its neighbours' copies one step later, ``x_{k+1} = W_k x_k + u_k`` (its own
update ``u_k`` at ``x_k`` at once, its neighbours' one step late), where ``delay=0`` averages after the update,
``x_{k+1} = W_k (x_k + u_k)`` (:mod:`plait.run.gossip`; :mod:`plait.cost.gossip` for the cost)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from plait.sync.base import SyncMethod, choice, number

if TYPE_CHECKING:
    from plait.sync.hooks import Costs, Crossing, OptimizerHooks, Pricing, R, Tally

Topology = Literal["ring", "torus", "exponential", "random", "complete", "random_ring"]
TOPOLOGIES: tuple[Topology, ...] = ("ring", "torus", "exponential", "random", "complete", "random_ring")


@dataclass(frozen=True, kw_only=True)
class Gossip(SyncMethod):
    """``gossip:topology=ring|torus|exponential|random|complete|random_ring[,peers=K][,delay=0|1]``."""

    name: ClassVar[str] = "gossip"
    infrequent: ClassVar[bool] = True
    point_to_point: ClassVar[bool] = True

    topology: Topology = choice("ring", TOPOLOGIES)
    """Which replicas are neighbours."""
    peers: int = number(1, 1, 2**20, True)
    """Neighbours each replica sends to per step (``exponential`` and ``random`` only; the others fix theirs)."""
    delay: int = number(0, 0, 1, True)
    """Steps the neighbours' copies arrive late: 1 overlaps the exchange with the next step (delay-by-one)."""

    def problem(self) -> str | None:
        if self.peers != 1 and self.topology not in ("exponential", "random"):
            return "peers applies to topology=exponential|random (the others fix their neighbours)"
        return None

    def graph(self) -> tuple[Topology, int]:
        return self.topology, self.peers

    def sent_bytes(self, tally: Tally) -> float:
        return tally.gossip_bytes(self)

    def crossing_bytes(self, crossing: Crossing) -> float:
        return crossing.gossip_bytes(self)

    def step_costs(self, price: Pricing) -> Costs:
        return price.gossip_costs(self)

    def wrap_optimizer(self, hooks: OptimizerHooks[R]) -> R:
        return hooks.gossip(self)
