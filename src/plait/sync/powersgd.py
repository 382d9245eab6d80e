"""PowerSGD: rank-R low-rank gradient compression with error feedback (Vogels et al. 2019, Algorithm 1).

Each gradient viewed as ``n x m`` (``shape[0] x rest``), ``r = min(n, m, R)``; compressed when
``(n + m) r C < n m`` (``min_compression_rate`` C; torch ``_should_compress``), then its P (``n r``) and Q
(``m r``) factors are all-reduced, else the whole tensor (torch 2.13 ``powerSGD_hook``,
docs/research/sync-methods.md); steps before ``start_iter`` send the plain all-reduce.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from plait.sync.base import GRAD_BYTES, SyncMethod, elements_of, number

if TYPE_CHECKING:
    from plait.workload.tensors import Shape


@dataclass(frozen=True, kw_only=True)
class PowerSGD(SyncMethod):
    """``powersgd:rank=R[,min_compression_rate=C,start_iter=S]``. Defaults: ``min_compression_rate`` 2 as
    ``PowerSGDState``'s (torch 2.13), ``start_iter`` 2, the least ``PowerSGDState`` accepts with error feedback."""

    name: ClassVar[str] = "powersgd"
    compressed: ClassVar[bool] = True

    rank: int = number(None, 1, 2**20, True)
    """The approximation's rank R (``matrix_approximation_rank``)."""
    min_compression_rate: float = number(2.0, 0.0, 1e6, False)
    """A tensor is compressed only where that shrinks it at least this many times (``min_compression_rate``)."""
    start_iter: int = number(2, 2, 2**31 - 1, True)
    """Steps of the plain all-reduce before compression starts (``start_powerSGD_iter``)."""

    def matrix(self, shape: Shape) -> tuple[int, int, int, bool]:
        """(n, m, r, compressed) of one gradient as PowerSGD views it (torch ``_should_compress``)."""
        n = shape[0]
        m = math.prod(shape[1:]) if len(shape) > 1 else 1
        r = min(n, m, self.rank)
        return n, m, r, (n + m) * r * self.min_compression_rate < n * m

    def step_payload_bytes(self, shapes: list[Shape], step: int | None) -> float:
        if step is not None and step < self.start_iter:
            return elements_of(shapes) * GRAD_BYTES
        matrices = (self.matrix(s) for s in shapes)
        return sum((n + m) * r if compressed else n * m for n, m, r, compressed in matrices) * GRAD_BYTES
