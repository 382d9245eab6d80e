"""An optimizer around another: what the synchronization methods wrap."""

from __future__ import annotations

import torch


class Wrapped(torch.optim.Optimizer):
    """Steps ``inner`` and shares its parameter groups, defaults and state, which learning-rate schedulers,
    clipping and checkpoints read. Like torchao's optimizer wrappers it does not call ``Optimizer.__init__``: the
    parameters belong to ``inner``."""

    def __init__(self, inner: torch.optim.Optimizer) -> None:
        self.inner = inner
        self.param_groups, self.defaults, self.state = inner.param_groups, inner.defaults, inner.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none)

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[no-untyped-def,override]
        return self.inner.step(closure)
