"""The host launches a piece of eager PyTorch code issues: every ATen operator it dispatches that moves data, one
launch each, as :mod:`plait.workloads.traced` counts a traced module's (views and :data:`FREE` operators move no
data and launch nothing). The code runs once under a ``TorchDispatchMode`` that only counts: a structural count, not
a timing; a prediction multiplies it by the accelerator's ``host_launch_us`` (:mod:`plait.cost.host`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

from plait.workloads.traced.recorder import FREE


def launches(code: Callable[[], Any]) -> int:
    """Operators ``code`` dispatches that launch a kernel (module docstring); ``code`` runs once."""

    class Counter(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if not (func.is_view or func._overloadpacket.__name__ in FREE):
                Counter.count += 1
            return func(*args, **(kwargs or {}))

    with Counter():
        code()
    return Counter.count
