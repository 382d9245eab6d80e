"""Job indices in the order they joined a set, as an array a pass reads without walking a dict: appended on
joining, blanked on leaving, compacted once mostly blank (each index is written and moved a bounded number of times per
joining, so upkeep is amortised constant and a read costs the set's size in numpy, not in Python)."""

from __future__ import annotations

import numpy as np


class OrderedIndices:
    """Indices below ``size`` in joining order; an index is in the set at most once."""

    def __init__(self, size: int) -> None:
        self._order = np.empty(64, dtype=np.int64)
        """Indices in joining order, -1 where one has left (until compacted)."""
        self._used, self._holes = 0, 0
        self._slot = np.zeros(size, dtype=np.int64)
        """Per index: its place in ``_order`` while in the set."""

    def append(self, index: int) -> None:
        """``index`` joins, last."""
        if self._used == len(self._order):
            self._compact()
            if self._used == len(self._order):
                self._order = np.concatenate([self._order, np.empty_like(self._order)])
        self._order[self._used], self._slot[index] = index, self._used
        self._used += 1

    def remove(self, index: int) -> None:
        """``index`` leaves."""
        self._order[self._slot[index]] = -1
        self._holes += 1

    def array(self) -> np.ndarray:
        """The indices in joining order (a copy)."""
        if 2 * self._holes > self._used:
            self._compact()
        order = self._order[: self._used]
        return order[order >= 0] if self._holes else order.copy()

    def _compact(self) -> None:
        if self._holes:
            live = self._order[: self._used]
            live = live[live >= 0]
            self._used, self._holes = len(live), 0
            self._order[: len(live)] = live
            self._slot[live] = np.arange(len(live))
