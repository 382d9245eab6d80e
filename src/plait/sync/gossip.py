"""Decentralized SGD: after each step a replica averages its parameters with its neighbours' (D-PSGD, Lian et al.
NeurIPS 2017; the topologies in :mod:`plait.plan.gossip`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from plait.sync.base import SyncMethod, choice, number

if TYPE_CHECKING:
    from plait.sync.hooks import Costs, Crossing, OptimizerHooks, Pricing, R, Tally

Topology = Literal["ring", "torus", "exponential", "random", "complete"]
TOPOLOGIES: tuple[Topology, ...] = ("ring", "torus", "exponential", "random", "complete")


@dataclass(frozen=True, kw_only=True)
class Gossip(SyncMethod):
    """``gossip:topology=ring|torus|exponential|random|complete[,peers=K]``."""

    name: ClassVar[str] = "gossip"
    infrequent: ClassVar[bool] = True
    point_to_point: ClassVar[bool] = True

    topology: Topology = choice("ring", TOPOLOGIES)
    """Which replicas are neighbours."""
    peers: int = number(1, 1, 2**20, True)
    """Neighbours each replica sends to per step (``exponential`` and ``random`` only; the others fix theirs)."""

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
