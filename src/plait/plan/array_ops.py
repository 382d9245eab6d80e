"""The column operations of :mod:`plait.plan.ops` over numpy arrays: what a batch of plans runs on.

A module of its own so that only array columns import numpy (:meth:`plait.plan.columns.PlanColumns.xp`): a single
plan's ``plait estimate`` runs on :data:`plait.plan.ops.SCALAR` and never loads it (numpy's import is about 40% of
that process's instructions, ``benchmarks/estimate_process.py --instructions``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import reduce
from typing import Any

import numpy as np

from plait.plan.ops import total_of


class ArrayOps:
    """numpy over columns of many plans."""

    scalar = False
    where = staticmethod(np.where)
    maximum = staticmethod(np.maximum)
    minimum = staticmethod(np.minimum)
    ceil = staticmethod(np.ceil)
    exp = staticmethod(np.exp)
    select = staticmethod(np.select)
    choose = staticmethod(np.choose)
    not_ = staticmethod(np.logical_not)
    total = staticmethod(total_of)

    @staticmethod
    def any_of(masks: Iterable[Any]) -> Any:
        """Rows where any mask holds, or'ed one mask at a time (``np.logical_or.reduce`` of a list stacks it into one
        2-D array first: three times the cost, measured on 32,768-row columns)."""
        return reduce(np.logical_or, masks, np.False_)

    @staticmethod
    def argmax(values: Sequence[Any]) -> Any:
        """Per row, the index of the largest of ``values`` (the first on ties)."""
        return np.argmax(np.stack(values), axis=0)

    @staticmethod
    def column(value: Any, size: int) -> np.ndarray:
        """``value`` (a scalar or a ``size``-long array) as a new float64 array of ``size`` rows
        (``np.broadcast_to`` did the same at several times the cost for a batch of one)."""
        array = np.asarray(value, dtype=np.float64)
        return array.copy() if array.shape == (size,) else np.full(size, array, dtype=np.float64)


ARRAY = ArrayOps()
