"""A tiny deterministic event kernel (STYLE.md rule 10, after SimPy's core).

Events are ordered by (time, priority, sequence): equal times resolve by priority, then by
the order they were scheduled, so a run is reproducible bit for bit. They sit in the heap as
plain tuples, compared in C; the sequence number is unique, so the action is never compared.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

Action = Callable[[], None]
_Event = tuple[float, int, int, Action]  # (time, priority, sequence, action)


class Kernel:
    """Run actions at simulated times."""

    def __init__(self) -> None:
        self._queue: list[_Event] = []
        self._counter = itertools.count()
        self.now = 0.0

    def at(self, time: float, action: Action, priority: int = 0) -> None:
        """Run ``action`` at ``time`` (never earlier than now)."""
        assert time >= self.now - 1e-12, "events cannot be scheduled in the past"
        heapq.heappush(self._queue, (max(time, self.now), priority, next(self._counter), action))

    def run(self) -> float:
        """Process every event; returns the time of the last one."""
        while self._queue:
            self.now, _, _, action = heapq.heappop(self._queue)
            action()
        return self.now
