"""Distinct rows through one integer key per row: the same rows, in the same order, as numpy's row-wise unique."""

from __future__ import annotations

import numpy as np
import pytest

from plait.plan.keys import distinct_rows, row_keys


def _numpy(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    stacked = np.stack(np.broadcast_arrays(*(np.asarray(c, dtype=float) for c in columns)), axis=1)
    values, first, inverse = np.unique(stacked, axis=0, return_index=True, return_inverse=True)
    return values, first, inverse.reshape(-1)


def test_toy_rows_by_hand() -> None:
    first, inverse = distinct_rows(np.array([2, 1, 2, 1]), np.array([5.0, 7.0, 5.0, 3.0]))
    assert first.tolist() == [3, 1, 0]  # (1, 3.0) < (1, 7.0) < (2, 5.0); first occurrences
    assert inverse.tolist() == [2, 1, 2, 0]


@pytest.mark.parametrize("seed", range(6))
def test_same_as_unique_over_rows(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    columns = [rng.integers(0, 4, n), rng.integers(-3, 3, n).astype(bool), rng.choice([0.5, 1e9, 3.25, 1e-6], n),
               rng.integers(0, 2**40, n) * (rng.integers(0, 9, n) == 0), rng.integers(1, 3, n) * 2**50]
    picked = [columns[i] for i in rng.permutation(len(columns))[:int(rng.integers(1, len(columns) + 1))]]
    values, first, inverse = _numpy(*picked)
    mine_first, mine_inverse = distinct_rows(*picked)
    assert mine_first.tolist() == first.tolist()
    assert mine_inverse.tolist() == inverse.tolist()
    assert np.array_equal(np.stack([np.asarray(c, dtype=float)[mine_first] for c in picked], axis=1), values)


def test_many_wide_columns_stay_exact() -> None:
    """Ten columns of 2**20 distinct values each overflow one int64 radix: the key is renumbered on the way."""
    rng = np.random.default_rng(7)
    columns = [rng.integers(0, 2**20, 500) for _ in range(10)]
    keys = row_keys(*columns)
    rows = [tuple(int(c[i]) for c in columns) for i in range(500)]
    order = sorted(range(500), key=lambda i: rows[i])
    assert [rows[i] for i in np.argsort(keys, kind="stable")] == [rows[i] for i in order]


@pytest.mark.parametrize("rows", [7, 600])  # a dict finds the distinct triples up to DICT_ROWS, a sort past it
def test_collective_columns_equal_each_rows_own_scalar_call(rows: int) -> None:
    from plait.cost.collectives import all_gather_s, group_link
    from plait.cost.links import DICT_ROWS, collective_s
    from plait.hardware.catalog import get_cluster

    cluster, rng = get_cluster("dgx-h100-ib"), np.random.default_rng(rows)
    size, stride = rng.choice([1, 2, 8, 16], rows), rng.choice([1, 8], rows)
    num_bytes = rng.choice([0.0, 3e5, 1.25e8, 7e9], rows)
    got = collective_s(cluster, "all_gather", size, stride, num_bytes)
    want = [all_gather_s(b, group_link(cluster, g, s)) if g > 1 and b > 0 else 0.0
            for g, s, b in zip(size.tolist(), stride.tolist(), num_bytes.tolist(), strict=True)]
    assert (rows > DICT_ROWS) == (rows == 600) and got.tolist() == want
