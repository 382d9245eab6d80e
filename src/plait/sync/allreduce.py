"""The dense fp32 gradient all-reduce: every step (DDP's own reduction), or one step late (Pipe-SGD).

- ``allreduce``: every gradient element, 4 bytes, every step;
- ``pipe_sgd``: every step one fp32 all-reduce of the whole gradient, applied one step later, behind the next
  step's compute (Li et al. 2018, Pipe-SGD, pipeline width 2; :class:`plait.run.sync.PipeSGD`), exposed only where
  it outlasts that compute or contends with it (Li et al. 2018, Sec. 3; :func:`plait.cost.overlap.engaged_s`),
  holding the gradient being reduced and the one to apply (two fp32 copies).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from plait.sync.base import GRAD_BYTES, SyncMethod, elements_of

if TYPE_CHECKING:
    from plait.sync.hooks import Costs, OptimizerHooks, Pricing, R
    from plait.workload.tensors import Shape


@dataclass(frozen=True, kw_only=True)
class AllReduce(SyncMethod):
    """The dense gradient all-reduce every step."""

    name: ClassVar[str] = "allreduce"

    @property
    def is_allreduce(self) -> bool:
        return True

    def step_payload_bytes(self, shapes: list[Shape], step: int | None) -> float:
        return elements_of(shapes) * GRAD_BYTES


@dataclass(frozen=True, kw_only=True)
class PipeSGD(SyncMethod):
    """Pipe-SGD: each step's all-reduce behind the next step's compute."""

    name: ClassVar[str] = "pipe_sgd"
    pipelined: ClassVar[bool] = True

    def step_payload_bytes(self, shapes: list[Shape], step: int | None) -> float:
        return elements_of(shapes) * GRAD_BYTES  # every step's gradient, all-reduced while the next step computes

    def step_costs(self, price: Pricing) -> Costs:
        return price.per_rank_tensors(lambda shapes: self._tensor_costs(price, shapes))

    def _tensor_costs(self, price: Pricing, shapes: list[Shape]) -> Costs:
        sent = elements_of(shapes) * float(GRAD_BYTES)
        reduce = price.all_reduce_s(price.replicas, price.stride, price.full(sent))
        return price.full(0.0), price.behind_next_step_s(reduce, sent), price.full(2.0 * sent)

    def wrap_optimizer(self, hooks: OptimizerHooks[R]) -> R:
        return hooks.pipe_sgd(self)
