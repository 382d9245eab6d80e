"""Gradients sparsified or quantized per tensor, with error feedback, and all-gathered.

- ``topk:ratio=F``: per gradient tensor ``k = ceil(F numel)`` fp32 values and int32 indices, all-gathered (each
  rank hands over its own ``8 k`` bytes; Lin et al. 2018, DGC; ``plait.run.sync.TopK``);
- ``quantize:bits=B``: per gradient tensor ``ceil(B numel / 8)`` bytes of packed codes and one fp32 scale,
  all-gathered: the nearest of ``2^(b-1) - 1`` levels (``plait.run.sync.Quantize``; 1 bit: EF-SignSGD's scaled
  sign, Karimireddy et al. 2019).

Time and memory (steady state): two all-gathers per gradient tensor (values and indices; codes and scale), each
paying its own latency, and the method's streaming passes over the fp32 gradient at the sustained memory bandwidth,
all exposed (``plait run`` keeps one bucket on gloo, so they follow the backward); memory: the error-feedback
residual and the dense sum, built one tensor at a time.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from plait.sync.base import FP32_PASS_BYTES, SyncMethod, elements_of, number

if TYPE_CHECKING:
    from plait.sync.hooks import Costs, GradientHooks, Pricing, R
    from plait.workload.tensors import Shape

QUANTIZE_BITS = (1, 4, 8)
"""The widths :class:`plait.run.sync.Quantize` packs."""
TOPK_PASSES = 11
"""Streaming passes over the fp32 gradient in :class:`plait.run.sync.TopK`: add into the residual (read 2,
write 1), absolute value (2), top-k selection (2: assumed, a radix select reads its input twice), the dense sum
(zero 1, index_add 0), the average (2) and the buffer copy (1)."""
QUANTIZE_PASSES = 10
"""Streaming passes over the fp32 gradient in :class:`plait.run.sync.Quantize` besides one per gathered rank:
residual add (3), the scale's reduction (1), quantize and pack (2), the own dequantize and residual update (3),
the average into the bucket (1)."""


@dataclass(frozen=True, kw_only=True)
class Gathered(SyncMethod):
    """A method that all-gathers two pieces per gradient tensor, each rank its own."""

    compressed: ClassVar[bool] = True
    collective: ClassVar[Literal["all_reduce", "all_gather"]] = "all_gather"

    def gathered_pieces(self, numel: int) -> tuple[float, float]:
        """Bytes one rank hands to each of the two all-gathers of one ``numel``-element tensor."""
        raise NotImplementedError

    def streamed_s(self, price: Pricing, elements: int) -> Any:
        """Seconds of the streaming passes over a rank's ``elements`` gradient elements."""
        raise NotImplementedError

    def step_payload_bytes(self, shapes: list[Shape], step: int | None) -> float:
        return sum(sum(self.gathered_pieces(math.prod(s))) for s in shapes)

    def step_costs(self, price: Pricing) -> Costs:
        return price.per_rank_tensors(lambda shapes: self._tensor_costs(price, shapes))

    def _tensor_costs(self, price: Pricing, shapes: list[Shape]) -> Costs:
        replicas, full = price.replicas, price.full
        gathered = 0.0
        for numel, count in Counter(math.prod(s) for s in shapes).items():
            pieces = self.gathered_pieces(numel)
            gathered = gathered + count * sum(price.all_gather_s(replicas, price.stride, replicas * full(b))
                                              for b in pieces)
        elements = elements_of(shapes)
        largest = max(math.prod(s) for s in shapes)  # a dense sum is built one tensor at a time
        memory = full((elements + largest) * float(FP32_PASS_BYTES))  # the residual, that sum
        return full(0.0), gathered + self.streamed_s(price, elements), memory


@dataclass(frozen=True, kw_only=True)
class TopK(Gathered):
    """``topk:ratio=F``: the largest fraction F of each gradient (Lin et al. 2018, DGC)."""

    name: ClassVar[str] = "topk"

    ratio: float = number(None, 1e-9, 1.0, False)
    """The fraction of each gradient tensor's elements sent."""

    def gathered_pieces(self, numel: int) -> tuple[float, float]:
        """fp32 values and int32 indices of the ``k`` largest elements."""
        k = math.ceil(self.ratio * numel)
        return 4.0 * k, 4.0 * k

    def streamed_s(self, price: Pricing, elements: int) -> Any:
        return price.full(TOPK_PASSES * elements * FP32_PASS_BYTES / price.memory_bytes_per_s)

    def comm_hook(self, hooks: GradientHooks[R]) -> R:
        return hooks.topk(self)


@dataclass(frozen=True, kw_only=True)
class Quantize(Gathered):
    """``quantize:bits=8|4|1``: per-tensor quantization (1 bit: EF-SignSGD, Karimireddy et al. 2019)."""

    name: ClassVar[str] = "quantize"

    bits: int = number(8, 1, 8, True)
    """Bits per element: one of :data:`QUANTIZE_BITS`."""

    def problem(self) -> str | None:
        if self.bits not in QUANTIZE_BITS:
            return f"bits must be one of {', '.join(map(str, QUANTIZE_BITS))}"
        return None

    def gathered_pieces(self, numel: int) -> tuple[float, float]:
        """Packed codes and the fp32 scale."""
        return float(-(-numel * self.bits // 8)), 4.0

    def streamed_s(self, price: Pricing, elements: int) -> Any:
        """Also dequantizes and adds every rank's codes: two passes per rank."""
        return (QUANTIZE_PASSES + 2 * price.replicas) * (elements * FP32_PASS_BYTES / price.memory_bytes_per_s)

    def comm_hook(self, hooks: GradientHooks[R]) -> R:
        return hooks.quantize(self)
