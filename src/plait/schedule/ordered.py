"""Job indices in the order they joined a set, as an array a pass reads without walking a dict: appended on
joining, cut out on leaving (its place found by bisecting the joining tickets, which rise along the array, and the
tail moved down by one: a memory move), so a read is one copy, not a filter over holes (on 5,500 int64, timeit,
numpy 2.4, the 2-core dev host at load 5, 2026-12-06: a copy or a move ~1 us, a boolean filter ~40 us). A float
may ride beside each index (``values=True``), moved with it, so that a pass reads it as a slice, not gathered from
a column over every job."""

from __future__ import annotations

import numpy as np


class OrderedIndices:
    """Indices below ``size`` in joining order; an index is in the set at most once."""

    def __init__(self, size: int, *, values: bool = False) -> None:
        self._order = np.empty(64, dtype=np.int64)
        """Indices in joining order."""
        self._ticket = np.empty(64, dtype=np.int64)
        """Beside each: its joining ticket (ascending)."""
        self._used, self._next = 0, 0
        self._ticket_of = np.zeros(size, dtype=np.int64)
        """Per index: its ticket while in the set."""
        self._value = np.empty(64) if values else None
        """Beside each index: its float (``values=True`` only)."""

    def append(self, index: int, value: float = 0.0) -> None:
        """``index`` joins, last (with ``value`` beside it, where values are kept)."""
        if self._used == len(self._order):
            self._order = np.concatenate([self._order, np.empty_like(self._order)])
            self._ticket = np.concatenate([self._ticket, np.empty_like(self._ticket)])
            if self._value is not None:
                self._value = np.concatenate([self._value, np.empty_like(self._value)])
        self._order[self._used], self._ticket[self._used] = index, self._next
        if self._value is not None:
            self._value[self._used] = value
        self._ticket_of[index] = self._next
        self._used, self._next = self._used + 1, self._next + 1

    def remove(self, index: int) -> None:
        """``index`` leaves."""
        n = self._used
        at = int(self._ticket[:n].searchsorted(self._ticket_of[index]))
        assert self._order[at] == index, "only an index in the set leaves it"
        for column in (self._order, self._ticket) if self._value is None else (self._order, self._ticket, self._value):
            column[at: n - 1] = column[at + 1: n]  # numpy copies overlapping slices safely
        self._used = n - 1

    def array(self) -> np.ndarray:
        """The indices in joining order (a copy)."""
        return self._order[: self._used].copy()

    def view(self) -> np.ndarray:
        """The indices in joining order (a view: read it before the set changes)."""
        return self._order[: self._used]

    def values(self) -> np.ndarray:
        """The floats beside the indices, in the same order (a view, written through; ``values=True`` only)."""
        assert self._value is not None, "values are kept only where asked for"
        return self._value[: self._used]
