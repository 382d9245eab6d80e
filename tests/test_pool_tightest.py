"""The pool finds the tightest node for a job from heaps per free count (:meth:`plait.schedule.pool.Pool._tightest`):
the node an ``argmin`` over every node's free GPUs finds (those short of the job left out, the lowest index among
equally tight ones), after any sequence of placements taken and given back."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plait.hardware.catalog import get_cluster
from plait.schedule.pool import Pool


def argmin_node(free: np.ndarray, gpus: int, per_node: int) -> int:
    tight = np.where(free >= gpus, free, per_node + 1)
    at = int(np.argmin(tight))
    return at if tight[at] <= per_node else -1


@settings(max_examples=30, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(1, 24), st.booleans()), min_size=1, max_size=60),
       nodes=st.sampled_from([1, 3, 8]))
def test_tightest_node_is_the_argmin_over_every_node(steps: list[tuple[int, bool]], nodes: int) -> None:
    pool = Pool(get_cluster("dgx-h100-ib"), 8 * nodes)
    held = []
    for gpus, give_back in steps:
        for asked in range(1, 9):
            assert pool._tightest(asked) == argmin_node(pool.free, asked, 8)
        if give_back and held:
            pool.give(held.pop(len(held) // 2))
        place = pool.packed(gpus)
        if place is not None:
            assert place.gpus == gpus
            pool.take(place)
            held.append(place)
        assert int(pool.free.sum()) == pool.free_gpus


def fewest_nodes(free: np.ndarray, gpus: int) -> tuple[tuple[int, int], ...] | None:
    """The placement rule stated by :meth:`Pool._pick`, walked node by node: the freest nodes whole (lowest index
    first among equally free ones) until the rest fits one node, then the tightest node that holds the rest."""
    if free.sum() < gpus:
        return None
    left, taken, nodes = gpus, [], sorted(range(len(free)), key=lambda n: (-free[n], n))
    while left > 0:
        fits = [n for n in nodes if free[n] >= left]
        if fits:
            taken.append((min(fits, key=lambda n: (free[n], n)), left))
            break
        taken.append((nodes[0], int(free[nodes[0]])))
        left -= int(free[nodes.pop(0)])
    return tuple(sorted(taken))


@settings(max_examples=30, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(1, 40), st.booleans()), min_size=1, max_size=60),
       nodes=st.sampled_from([2, 5, 8]))
def test_packed_placement_follows_the_fewest_nodes_rule(steps: list[tuple[int, bool]], nodes: int) -> None:
    pool = Pool(get_cluster("dgx-h100-ib"), 8 * nodes)
    held = []
    for gpus, give_back in steps:
        if give_back and held:
            pool.give(held.pop(len(held) // 2))
        expected = fewest_nodes(pool.free.copy(), gpus)
        place = pool.packed(gpus)
        assert (None if place is None else place.nodes) == expected
        if place is not None:
            pool.take(place)
            held.append(place)
