"""Collective times for columns of (group size, rank stride, bytes), one scalar call per distinct triple.

The scalar alpha-beta functions of :mod:`plait.cost.collectives` stay the one source of
truth; a planner batch holds few distinct groups and message sizes, so each distinct
combination is costed once and broadcast.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from plait.cost import collectives as coll
from plait.hardware.cluster import Cluster
from plait.plan.ops import is_array

if TYPE_CHECKING:
    import numpy as np

Collective = Callable[[float, coll.GroupLink], float]
_PLAIN = frozenset((float, int, bool))
"""Types of a single plan's values, which are never numpy arrays."""

KINDS: dict[str, Collective] = {
    "all_reduce": coll.all_reduce_s,
    "all_gather": coll.all_gather_s,
    "reduce_scatter": coll.reduce_scatter_s,
    "p2p": coll.p2p_s,
    "all_to_all": coll.all_to_all_s,
}


def collective_s(cluster: Cluster, kind: str, size: np.ndarray, stride: np.ndarray,
                 num_bytes: np.ndarray) -> np.ndarray:
    """Seconds of collective ``kind`` for each row (0 where the group has one rank or no bytes); for plain numbers
    (one plan, :data:`plait.plan.ops.SCALAR`), a float."""
    # one plan: one scalar call (a float or an int is no array: the type asked first, without a call)
    if (type(num_bytes) in _PLAIN or not is_array(num_bytes)) and (type(size) in _PLAIN or not is_array(size)):
        return _one(cluster, kind, size, stride, num_bytes) if size > 1 and num_bytes > 0 else 0.0
    import numpy as np  # columns only: a single plan's estimate runs without numpy

    if np.size(num_bytes) == 1 and np.size(size) == 1 and np.size(stride) == 1:  # a batch of one
        g, s, b = int(np.ravel(size)[0]), int(np.ravel(stride)[0]), float(np.ravel(num_bytes)[0])
        value = KINDS[kind](b, coll.group_link(cluster, g, s)) if g > 1 and b > 0 else 0.0
        return np.full(np.shape(num_bytes), value)
    size = np.broadcast_to(np.asarray(size, dtype=np.int64), np.shape(num_bytes))
    stride = np.broadcast_to(np.asarray(stride, dtype=np.int64), np.shape(num_bytes))
    num_bytes = np.asarray(num_bytes, dtype=np.float64)
    out = np.zeros(num_bytes.shape)
    active = (size > 1) & (num_bytes > 0)
    if not active.any():
        return out
    size, stride, num_bytes = size[active], stride[active], num_bytes[active]
    distinct, inverse = _distinct(size, stride, num_bytes)
    fn = KINDS[kind]
    links: dict[tuple[int, int], coll.GroupLink] = {}
    values = np.empty(len(distinct))
    for i, (g, s, b) in enumerate(distinct):
        if (g, s) not in links:
            links[(g, s)] = coll.group_link(cluster, g, s)
        values[i] = fn(b, links[(g, s)])
    out[active] = values[inverse]
    return out


DICT_ROWS = 512
"""Rows up to which :func:`_distinct` finds the distinct triples with a dict (timeit on the 2-core dev host at load
3, numpy 2.4, 2026-12-07: 18 us vs 122 us for 50 rows, 68 us vs 150 us for 222, 228 us vs 194 us for 700 rows;
:func:`plait.plan.keys.distinct_rows` sorts)."""


def _distinct(size: np.ndarray, stride: np.ndarray,
              num_bytes: np.ndarray) -> tuple[list[tuple[int, int, float]], np.ndarray]:
    """(the distinct (group size, stride, bytes) triples, per row the index of its triple). Each row's time is a
    function of its triple alone, so the triples' order does not change a row's figure: a dict keeps them in the
    order they first occur (the bytes are positive, so equal floats are equal keys), a sort for long columns."""
    import numpy as np

    if len(size) <= DICT_ROWS:
        seen: dict[tuple[int, int, float], int] = {}
        rows = zip(size.tolist(), stride.tolist(), num_bytes.tolist(), strict=True)
        where = [seen.setdefault(row, len(seen)) for row in rows]
        return list(seen), np.array(where, dtype=np.int64)
    from plait.plan.keys import distinct_rows

    first, inverse = distinct_rows(size, stride, num_bytes)
    return list(zip(size[first].tolist(), stride[first].tolist(), num_bytes[first].tolist(), strict=True)), inverse


KEPT_TIMES = 4096
"""Most single-plan collective times :func:`_one` keeps per cluster (emptied when full)."""


def _one(cluster: Cluster, kind: str, size: int, stride: int, num_bytes: float) -> float:
    """One collective's seconds, kept on the cluster by (kind, group, stride, bytes): a function of the cluster's
    tiers alone, as its group views are (:func:`plait.cost.collectives.group_link`); estimates of plans of one model
    send the same messages over the same groups again."""
    times = cluster.link_cache.get("times")
    if times is None:
        times = cluster.link_cache["times"] = {}
    key = (kind, size, stride, num_bytes)
    found = times.get(key)
    if found is None:
        if len(times) >= KEPT_TIMES:
            times.clear()
        found = times[key] = KINDS[kind](float(num_bytes), coll.group_link(cluster, size, stride))
    return found  # type: ignore[no-any-return]
