"""Distinct rows of several columns, found through one integer key per row.

The cost model computes many per-row quantities once per distinct combination of a few columns (a planner batch
of 60,000 plans holds a few hundred). ``np.unique(np.stack(columns, axis=1), axis=0)`` finds them by sorting rows
as structured records, which took a third of the search's time; here each row's combination is packed into one
int64 (mixed radix, the first column most significant), whose 1-D sort is several times cheaper. The key orders
rows as the lexicographic order of their values, so the distinct rows come out in the order ``axis=0`` gives.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_LIMIT = 1 << 62
"""Keys stay below this (int64 without overflow in ``key * radix + code``)."""


def _codes(column: Any, rows: int) -> tuple[np.ndarray, int]:
    """(per row a code in [0, radix) ordered as the values, radix) of one column."""
    values = np.asarray(column)
    if values.dtype == bool:
        values = values.astype(np.int64)
    if values.dtype.kind in "iu" and len(values):
        low, high = int(values.min()), int(values.max())
        if high - low < max(rows, 1024):  # a narrow range of integers: the offset is the code, no sort needed
            return (values - low).astype(np.int64), high - low + 1
    distinct, codes = np.unique(values, return_inverse=True)
    return codes.reshape(-1).astype(np.int64), max(len(distinct), 1)


def row_keys(*columns: Any) -> np.ndarray:
    """One int64 per row of equal-length ``columns`` (numbers or bools, scalars broadcast), equal exactly where the
    rows' values are equal and ordered as the rows' values are lexicographically."""
    arrays = np.broadcast_arrays(*(np.asarray(c) for c in columns))
    rows = len(arrays[0]) if arrays and arrays[0].ndim else 1
    key, size = np.zeros(rows, dtype=np.int64), 1
    for column in arrays:
        codes, radix = _codes(np.ravel(column), rows)
        if size * radix >= _LIMIT:  # renumber the key so far densely (at most ``rows`` values) before going on
            distinct, key = np.unique(key, return_inverse=True)
            key, size = key.reshape(-1).astype(np.int64), len(distinct)
        key, size = key * radix + codes, size * radix
    return key


def distinct_rows(*columns: Any) -> tuple[np.ndarray, np.ndarray]:
    """(index of each distinct row's first occurrence, per row the index of its distinct row), the distinct rows in
    their values' lexicographic order: what ``np.unique(np.stack(columns, axis=1), axis=0, return_index=True,
    return_inverse=True)`` gives, less the distinct values themselves (``columns[i][first]``)."""
    _, first, inverse = np.unique(row_keys(*columns), return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)
