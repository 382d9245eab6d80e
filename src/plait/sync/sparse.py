"""Gradients sparsified or quantized per tensor, with error feedback, and all-gathered.

- ``topk:ratio=F``: per gradient tensor ``k = ceil(F numel)`` fp32 values and int32 indices, all-gathered (each
  rank hands over its own ``8 k`` bytes; Lin et al. 2018, DGC; ``plait.run.sync.TopK``);
- ``quantize:bits=B``: per gradient tensor ``ceil(B numel / 8)`` bytes of packed codes and one fp32 scale,
  all-gathered: the nearest of ``2^(b-1) - 1`` levels (``plait.run.sync.Quantize``; 1 bit: EF-SignSGD's scaled
  sign, Karimireddy et al. 2019).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from plait.sync.base import SyncMethod, number

if TYPE_CHECKING:
    from plait.workload.tensors import Shape

QUANTIZE_BITS = (1, 4, 8)
"""The widths :class:`plait.run.sync.Quantize` packs."""


@dataclass(frozen=True, kw_only=True)
class Gathered(SyncMethod):
    """A method that all-gathers two pieces per gradient tensor, each rank its own."""

    compressed: ClassVar[bool] = True

    def gathered_pieces(self, numel: int) -> tuple[float, float]:
        """Bytes one rank hands to each of the two all-gathers of one ``numel``-element tensor."""
        raise NotImplementedError

    def step_payload_bytes(self, shapes: list[Shape], step: int | None) -> float:
        return sum(sum(self.gathered_pieces(math.prod(s))) for s in shapes)


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
