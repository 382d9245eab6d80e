"""Dynamic loss scaling for fp16 training (Micikevicius et al., "Mixed Precision Training", ICLR 2018, Sec. 3.2).

fp16 keeps 5 exponent bits: gradients below 2^-24 flush to zero. The loss is multiplied by a scale ``S`` before the
backward pass, so the gradients come out ``S`` times larger and small ones survive; they are divided by ``S`` before
clipping and the optimizer step. A step whose gradients overflowed (a non-finite global gradient norm) is skipped and
``S`` halved; after ``growth_interval`` finite steps in a row ``S`` doubles. The constants are
``torch.amp.GradScaler``'s defaults (init_scale 2^16, growth_factor 2, backoff_factor 0.5, growth_interval 2000;
https://docs.pytorch.org/docs/stable/amp.html#torch.amp.GradScaler).

Not ``GradScaler`` itself: its overflow check is per rank, so under FSDP2 each rank would judge its own gradient
shard and ranks could disagree on skipping a step (torch's ``ShardedGradScaler`` all-reduces that flag, for FSDP1).
Here the decision is plait's global gradient norm (:func:`plait.run.train.clip_gradients`), the same on every rank.
bf16 keeps fp32's exponent range and needs no scaling. A checkpoint holds the scale and its count of finite steps
(:meth:`LossScale.state`), so a resumed run goes on with the scale it had.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from plait.run.local import local_tensor

INIT_SCALE = 2.0**16
"""torch.amp.GradScaler's ``init_scale``."""
GROWTH_INTERVAL = 2000
"""torch.amp.GradScaler's ``growth_interval``: finite steps in a row before the scale doubles."""


@dataclass
class LossScale:
    """The current scale and the finite steps since it last changed."""

    scale: float = INIT_SCALE
    growth_interval: int = GROWTH_INTERVAL
    finite_steps: int = 0

    def wrap(self, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
             ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """``loss_fn`` times the scale current when it is called (a pipeline schedule calls it per micro-batch)."""
        return lambda out, target: loss_fn(out, target) * self.scale

    @torch.no_grad()
    def unscale(self, params: list[torch.Tensor]) -> None:
        """Divide every gradient of ``params`` (each rank's local shard) by the scale."""
        grads = [local_tensor(p.grad) for p in params if p.grad is not None]
        if grads:
            torch._foreach_mul_(grads, 1.0 / self.scale)

    def state(self) -> torch.Tensor:
        """The scale and the finite steps since it last changed, as one tensor a checkpoint can hold."""
        return torch.tensor([self.scale, float(self.finite_steps)], dtype=torch.float64)

    def load_state(self, state: torch.Tensor) -> None:
        """Take back what :meth:`state` gave (a resumed run)."""
        self.scale, self.finite_steps = float(state[0]), int(state[1])

    def update(self, finite: bool) -> None:
        """After a step: halve the scale on an overflow, double it after ``growth_interval`` finite steps."""
        if not finite:
            self.scale, self.finite_steps = self.scale / 2.0, 0
            return
        self.finite_steps += 1
        if self.finite_steps == self.growth_interval:
            self.scale, self.finite_steps = self.scale * 2.0, 0


def loss_scale_for(precision: str, full_precision: bool) -> LossScale | None:
    """A loss scale where the run computes in fp16; ``None`` otherwise."""
    return LossScale() if precision == "fp16" and not full_precision else None
