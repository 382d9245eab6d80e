"""The gradient all-reduced in 16 bits: PyTorch's ``bf16_compress_hook``/``fp16_compress_hook``.

Every element in 2 bytes (PyTorch ``_compress_hook``: one all-reduce of the cast bucket).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from plait.sync.base import SyncMethod, elements_of

if TYPE_CHECKING:
    from plait.workload.tensors import Shape


@dataclass(frozen=True, kw_only=True)
class HalfPrecision(SyncMethod):
    """The gradient cast to a 16-bit type, all-reduced, cast back."""

    compressed: ClassVar[bool] = True
    dtype: ClassVar[Literal["bf16", "fp16"]]
    """The 16-bit type the gradient travels in."""

    def step_payload_bytes(self, shapes: list[Shape], step: int | None) -> float:
        return elements_of(shapes) * 2


@dataclass(frozen=True, kw_only=True)
class Bf16(HalfPrecision):
    """The gradient all-reduced in bfloat16."""

    name: ClassVar[str] = "bf16"
    dtype: ClassVar[Literal["bf16", "fp16"]] = "bf16"


@dataclass(frozen=True, kw_only=True)
class Fp16(HalfPrecision):
    """The gradient all-reduced in float16."""

    name: ClassVar[str] = "fp16"
    dtype: ClassVar[Literal["bf16", "fp16"]] = "fp16"
