"""The gradient all-reduced in 16 bits: PyTorch's ``bf16_compress_hook``/``fp16_compress_hook``.

Every element in 2 bytes (PyTorch ``_compress_hook``: one all-reduce of the cast bucket). Overlap (assumed from the
runtime): in DDP's bucketed hooks like the all-reduce, so behind the backward pass; over TP or PP replicas, which
DDP does not take, after the backward (:mod:`plait.run.replica_grads`), so exposed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from plait.sync.base import SyncMethod, elements_of

if TYPE_CHECKING:
    from plait.sync.hooks import Costs, GradientHooks, Pricing, R
    from plait.workload.tensors import Shape


@dataclass(frozen=True, kw_only=True)
class HalfPrecision(SyncMethod):
    """The gradient cast to a 16-bit type, all-reduced, cast back."""

    compressed: ClassVar[bool] = True
    dtype: ClassVar[Literal["bf16", "fp16"]]
    """The 16-bit type the gradient travels in."""

    def step_payload_bytes(self, shapes: list[Shape], step: int | None) -> float:
        return elements_of(shapes) * 2

    def step_costs(self, price: Pricing) -> Costs:
        return price.per_rank_tensors(lambda shapes: self._tensor_costs(price, shapes))

    def _tensor_costs(self, price: Pricing, shapes: list[Shape]) -> Costs:
        reduce = price.all_reduce_s(price.replicas, price.stride, price.full(elements_of(shapes) * 2.0))
        return price.xp.where(price.split, 0.0, reduce), price.xp.where(price.split, reduce, 0.0), price.full(0.0)

    def comm_hook(self, hooks: GradientHooks[R]) -> R:
        return hooks.half(self)


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
