"""PowerSGD: rank-R low-rank gradient compression with error feedback (Vogels et al. 2019, Algorithm 1).

Each gradient viewed as ``n x m`` (``shape[0] x rest``), ``r = min(n, m, R)``; compressed when
``(n + m) r C < n m`` (``min_compression_rate`` C; torch ``_should_compress``), then its P (``n r``) and Q
(``m r``) factors are all-reduced, else the whole tensor (torch 2.13 ``powerSGD_hook``,
docs/research/sync-methods.md); steps before ``start_iter`` send the plain all-reduce.

Time and memory (steady state): the plain tensors', P's and Q's all-reduces, dependent, and their compute taken as
exposed (``plait run`` keeps one bucket on gloo, so they follow the backward); per compressed ``n x m`` matrix
``6 n m r + 2 n r^2`` flops (P = MQ, Q = M^R P, M - PQ^R; Gram-Schmidt of P) at the fp32 peak (optimistic) and
:data:`POWERSGD_PASSES` streaming passes at the sustained memory bandwidth; memory: the compressed tensors'
error-feedback buffers, P and Q.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from plait.sync.base import FP32_PASS_BYTES, GRAD_BYTES, SyncMethod, elements_of, number

if TYPE_CHECKING:
    from plait.sync.hooks import Costs, GradientHooks, Pricing, R
    from plait.workload.tensors import Shape

POWERSGD_PASSES = 4
"""Streaming passes over each compressed matrix besides its GEMMs: error feedback's add (read 2, write 1) and the
copy of the decompressed result into the bucket (1)."""


@dataclass(frozen=True, kw_only=True)
class PowerSGD(SyncMethod):
    """``powersgd:rank=R[,min_compression_rate=C,start_iter=S]``. Defaults: ``min_compression_rate`` 2 as
    ``PowerSGDState``'s (torch 2.13), ``start_iter`` 2, the least ``PowerSGDState`` accepts with error feedback."""

    name: ClassVar[str] = "powersgd"
    compressed: ClassVar[bool] = True
    one_bucket: ClassVar[bool] = True

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

    def step_costs(self, price: Pricing) -> Costs:
        return price.per_rank_tensors(lambda shapes: self._tensor_costs(price, shapes))

    def _tensor_costs(self, price: Pricing, shapes: list[Shape]) -> Costs:
        p = q = plain = flops = streamed = 0.0
        for shape, count in Counter(shapes).items():
            n, m, r, compressed = self.matrix(shape)
            if compressed:
                p, q = p + count * n * r, q + count * m * r
                flops += count * (6.0 * n * m * r + 2.0 * n * r * r)  # P = MQ, Q = M^R P, M - PQ^R; Gram-Schmidt
                streamed += count * POWERSGD_PASSES * n * m * FP32_PASS_BYTES
            else:
                plain += count * n * m
        comm = sum(price.all_reduce_s(price.replicas, price.stride, price.full(x * GRAD_BYTES)) for x in (plain, p, q))
        memory = (elements_of(shapes) - plain + p + q) * GRAD_BYTES  # error feedback of compressed tensors, P, Q
        compute = price.full(flops / price.fp32_flops_per_s + streamed / price.memory_bytes_per_s)
        return price.full(0.0), comm + compute, price.full(memory)

    def comm_hook(self, hooks: GradientHooks[R]) -> R:
        return hooks.powersgd(self)
