"""Asynchronous methods, on server ranks beyond the workers (:mod:`plait.run.async_train`,
:mod:`plait.cost.async_sgd`).

- ``async_ps:staleness=B[,servers=S]``: asynchronous, bounded-staleness SGD through servers (Stale Synchronous
  Parallel, Ho et al., NeurIPS 2013);
- ``easgd:alpha=A,every=H``: asynchronous elastic averaging SGD (Zhang, Choromanska & LeCun, NeurIPS 2015).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from plait.sync.base import SyncMethod, number


@dataclass(frozen=True, kw_only=True)
class AsyncPS(SyncMethod):
    """Bounded-staleness asynchronous SGD through sharded servers."""

    name: ClassVar[str] = "async_ps"
    asynchronous: ClassVar[bool] = True
    point_to_point: ClassVar[bool] = True

    staleness: int = number(None, 0, 2**20, True)
    """Steps a worker may run ahead of the slowest (0: synchronous)."""
    servers: int = number(1, 1, 2**20, True)
    """Server ranks, each holding a shard of the parameters."""

    @property
    def server_ranks(self) -> int:
        return self.servers


@dataclass(frozen=True, kw_only=True)
class EASGD(SyncMethod):
    """Asynchronous elastic averaging SGD with one centre server."""

    name: ClassVar[str] = "easgd"
    asynchronous: ClassVar[bool] = True
    point_to_point: ClassVar[bool] = True

    alpha: float = number(None, 0.0, 1.0, False)
    """The elastic force: how far worker and centre move toward each other."""
    every: int = number(None, 1, 2**31 - 1, True)
    """Steps between a worker's exchanges with the centre."""

    @property
    def server_ranks(self) -> int:
        """One centre."""
        return 1
