"""Asynchronous methods, on server ranks beyond the workers (:mod:`plait.run.async_train`,
:mod:`plait.cost.async_sgd`).

- ``async_ps:staleness=B[,servers=S]``: asynchronous, bounded-staleness SGD through servers (Stale Synchronous
  Parallel, Ho et al., NeurIPS 2013);
- ``easgd:alpha=A,every=H``: asynchronous elastic averaging SGD (Zhang, Choromanska & LeCun, NeurIPS 2015).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from plait.sync.base import SyncMethod, number

if TYPE_CHECKING:
    from plait.sync.hooks import Costs, Crossing, Pricing, Tally, WorkerHooks

ADAMW_PASSES = 7
"""fp32 streams of one AdamW step per element: read gradient, parameter and both moments, write three."""
LARGEST_BOUND = 2**20
"""The largest staleness bound a spec takes: no run lasts long enough for it to hold a worker, so it is costed as
no bound (:mod:`plait.predict.mixed`)."""
ELASTIC_PASSES = 3
"""fp32 streams of the centre's elastic update per element: read both copies, write the centre."""


@dataclass(frozen=True, kw_only=True)
class Asynchronous(SyncMethod):
    """A method whose workers exchange with server ranks without waiting for each other."""

    asynchronous: ClassVar[bool] = True
    point_to_point: ClassVar[bool] = True
    server_passes: ClassVar[int]
    """fp32 streams per element a server makes applying one message (:mod:`plait.cost.async_sgd`)."""

    @property
    def lockstep(self) -> bool:
        """Whether every worker waits for the slowest each iteration (then simulated, :mod:`plait.cost.async_sgd`)."""
        return False

    def sent_bytes(self, tally: Tally) -> float:
        return tally.worker_bytes(self)

    def crossing_bytes(self, crossing: Crossing) -> float:
        return crossing.worker_bytes(self)

    def step_costs(self, price: Pricing) -> Costs:
        return price.async_costs(self)


@dataclass(frozen=True, kw_only=True)
class AsyncPS(Asynchronous):
    """Bounded-staleness asynchronous SGD through sharded servers, which step AdamW over their pieces."""

    name: ClassVar[str] = "async_ps"
    server_passes: ClassVar[int] = ADAMW_PASSES
    servers_hold_model: ClassVar[bool] = True

    staleness: int = number(None, 0, LARGEST_BOUND, True)
    """Steps a worker may run ahead of the slowest (0: synchronous)."""
    servers: int = number(1, 1, 2**20, True)
    """Server ranks, each holding a shard of the parameters."""

    @property
    def server_ranks(self) -> int:
        return self.servers

    @property
    def staleness_bound(self) -> int:
        return self.staleness

    @property
    def lockstep(self) -> bool:
        return self.staleness == 0

    @property
    def holds_fast_workers(self) -> bool:
        """Whether, over a long run, the bound makes every worker step at the slowest's pace (any bound short of
        :data:`LARGEST_BOUND`: the fastest stays at most ``staleness`` iterations ahead, Ho et al. 2013)."""
        return self.staleness < LARGEST_BOUND

    def worker_step(self, worker: WorkerHooks, step: int) -> None:
        worker.push_gradient()


@dataclass(frozen=True, kw_only=True)
class EASGD(Asynchronous):
    """Asynchronous elastic averaging SGD with one centre server."""

    name: ClassVar[str] = "easgd"
    server_passes: ClassVar[int] = ELASTIC_PASSES

    alpha: float = number(None, 0.0, 1.0, False)
    """The elastic force: how far worker and centre move toward each other."""
    every: int = number(None, 1, 2**31 - 1, True)
    """Steps between a worker's exchanges with the centre."""

    @property
    def server_ranks(self) -> int:
        """One centre."""
        return 1

    @property
    def elastic_force(self) -> float:
        return self.alpha

    def worker_step(self, worker: WorkerHooks, step: int) -> None:
        worker.reduce_and_step()
        if (step + 1) % self.every == 0:
            worker.push_parameters()
