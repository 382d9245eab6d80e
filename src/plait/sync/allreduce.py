"""The dense fp32 gradient all-reduce: every step (DDP's own reduction), or one step late (Pipe-SGD).

- ``allreduce``: every gradient element, 4 bytes, every step;
- ``pipe_sgd``: every step one fp32 all-reduce of the whole gradient, applied one step later, behind the next
  step's compute (Li et al. 2018, Pipe-SGD, pipeline width 2; :class:`plait.run.sync.PipeSGD`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from plait.sync.base import GRAD_BYTES, SyncMethod, elements_of

if TYPE_CHECKING:
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
