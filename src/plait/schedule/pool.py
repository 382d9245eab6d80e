"""The cluster's GPUs as a pool of nodes inside the blocks of its network tiers, and where a job's GPUs sit.

Nodes are consecutive blocks of ``gpus_per_node`` GPUs; tier ``i`` joins consecutive blocks of ``span_gpus`` GPUs
(:class:`plait.hardware.cluster.NetworkTier`), so node ``n`` lies in block ``n * gpus_per_node // span_gpus`` of
each tier. A placement is which nodes a job holds and how many GPUs on each. :meth:`Pool.spans` says which tiers the
job's collectives then cross: plait's cost model puts consecutive ranks in the blocks of each tier's span, so a job
holding fewer GPUs of a block than the span sees that tier's span shrunk to what it holds (8 GPUs as 2 on each of
4 nodes: scale-up span 2, and its groups of 4 and 8 cross the network), the modelling the 001-13 paper
(arXiv 2401.16492) measures as the slowdown of a job spread over machines.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from plait.errors import ConfigError
from plait.hardware.cluster import Cluster


@dataclass(frozen=True, kw_only=True)
class Placement:
    """The GPUs one job holds."""

    nodes: tuple[tuple[int, int], ...]
    """(node index, GPUs held there), by node index."""
    gpus: int = field(init=False, compare=False, repr=False)
    """GPUs held in all (summed once: every start, stop and pass reads it)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpus", sum(n for _, n in self.nodes))

    @property
    def num_nodes(self) -> int:
        """Nodes it spans."""
        return len(self.nodes)


def _floor_power_of_two(n: int) -> int:
    return 1 << (n.bit_length() - 1)


class Pool:
    """Free GPUs per node of the first ``gpus`` GPUs of ``cluster``."""

    def __init__(self, cluster: Cluster, gpus: int) -> None:
        per_node = cluster.gpus_per_node
        if gpus < per_node or gpus % per_node:
            raise ConfigError(f"--gpus={gpus} must be a positive multiple of {cluster.name}'s {per_node} GPUs per node")
        if gpus > cluster.max_gpus:
            raise ConfigError(f"--gpus={gpus} exceeds {cluster.name}'s {cluster.max_gpus} GPUs")
        self.cluster = cluster
        self.gpus_per_node = per_node
        self.capacity_gpus = gpus
        self.num_nodes = gpus // per_node
        self.free = np.full(self.num_nodes, per_node, dtype=np.int64)
        self.free_gpus = gpus
        self._by_free: list[list[int]] = [[] for _ in range(per_node)] + [list(range(self.num_nodes))]
        """Per free count ``f``: a heap of node indices, each node pushed whenever its free GPUs become ``f`` and
        read only while it still has ``f`` (entries left behind are dropped when they reach the top), so that the
        tightest node holding a job (:meth:`_tightest`) costs a few heap reads instead of a pass over every node."""
        self._native_spans = tuple(t.span_gpus for t in cluster.tiers)
        self.tier_nodes = tuple(max(1, t.span_gpus // per_node) for t in cluster.tiers)
        """Nodes in one block of each tier (1 where a tier is no wider than a node)."""
        self._in_use_type = np.min_scalar_type(per_node)
        """The smallest unsigned type holding a node's GPUs (:meth:`_pick` sorts by it)."""
        self._one_node: dict[tuple[int, int], Placement] = {}
        """One-node placements by (node, GPUs), built once: placements are immutable, and most jobs take one."""
        self._spans: dict[tuple[tuple[int, int], ...], tuple[int, ...]] = {}
        """:meth:`spans` of each multi-node placement seen, by its nodes (it depends on nothing else)."""

    def min_nodes(self, gpus: int) -> int:
        """Fewest nodes ``gpus`` GPUs can sit on."""
        return -(-gpus // self.gpus_per_node)

    def _pick(self, gpus: int, candidates: np.ndarray | None) -> Placement | None:
        """Fewest of ``candidates`` (node indices; ``None``: every node) holding ``gpus`` free GPUs: fullest-free
        first, the remainder on the node it fits best (least free left over), so that small jobs fill holes instead
        of whole nodes."""
        free = self.free if candidates is None else self.free[candidates]
        # The loop below's first turn, without its sort: the tightest node that holds them all, the lowest
        # index among equally tight ones (the stable sort keeps index order among equal free counts).
        if candidates is None:
            at = self._tightest(gpus)
            if at >= 0:
                return self._on_one_node(at, gpus)
        else:
            tight = np.where(free >= gpus, free, self.gpus_per_node + 1)
            at = int(tight.argmin())
            if tight[at] <= self.gpus_per_node:
                return self._on_one_node(int(candidates[at]), gpus)
        if candidates is not None and free.sum() < gpus:  # every node: :meth:`packed` checked ``free_gpus``
            return None
        # Fullest-free first, index order among equal counts: a stable sort of the GPUs in use on each node as the
        # smallest unsigned type (numpy sorts 8- and 16-bit keys by radix: ~30 us on 2,048 nodes against ~110 us for
        # int64, timeit, numpy 2.4, the 2-core dev host at load 10, 2026-12-06).
        in_use = (self.gpus_per_node - free).astype(self._in_use_type)
        order = in_use.argsort(kind="stable")
        in_order = free[order]  # free GPUs along ``order``: non-increasing
        order = order if candidates is None else candidates[order]
        # Nodes are taken whole along ``order`` until the rest fits on one node not taken; the freest of those is the
        # next in order, so the rest fits from the first node where the free GPUs taken plus its own reach ``gpus``:
        # the first ``at`` whose running sum does (the walk a node at a time, as one bisection).
        held = in_order.cumsum()
        at = int(held.searchsorted(gpus, "left"))
        left = gpus - (int(held[at - 1]) if at else 0)
        minus = -in_order  # ascending, to bisect
        end = int(minus.searchsorted(-left, "right"))  # ``order[:end]``: the nodes that hold ``left`` (``at`` does)
        first = int(minus.searchsorted(minus[end - 1], "left"))  # the tightest, the first in order among equals
        taken = [*zip(order[:at].tolist(), in_order[:at].tolist(), strict=True), (int(order[max(first, at)]), left)]
        return Placement(nodes=tuple(sorted(taken)))

    def _on_one_node(self, node: int, gpus: int) -> Placement:
        """``gpus`` GPUs on ``node``."""
        place = self._one_node.get((node, gpus))
        if place is None:
            place = self._one_node[node, gpus] = Placement(nodes=((node, gpus),))
        return place

    def _tightest(self, gpus: int) -> int:
        """The node with the fewest free GPUs that still holds ``gpus``, the lowest index among equally tight ones
        (-1: none), as ``argmin`` over every node's free count (those short of ``gpus`` left out) finds it."""
        free, by_free = self.free, self._by_free
        for count in range(max(gpus, 1), self.gpus_per_node + 1):
            heap = by_free[count]
            while heap and free[heap[0]] != count:
                heapq.heappop(heap)
            if heap:
                return heap[0]
        return -1

    def packed(self, gpus: int) -> Placement | None:
        """``gpus`` GPUs on the fewest nodes free now, wherever they are (``None``: fewer are free)."""
        if gpus > self.free_gpus:
            return None
        return self._pick(gpus, None)

    def consolidated(self, gpus: int) -> Placement | None:
        """``gpus`` GPUs on the fewest nodes possible (:meth:`min_nodes`) inside one block of the innermost tier
        wide enough for them, so that the job crosses no tier it would not cross on an empty cluster (``None``:
        no such place is free now)."""
        if gpus > self.free_gpus:
            return None
        wide = next((n for n in self.tier_nodes if n * self.gpus_per_node >= gpus), self.num_nodes)
        block = min(wide, self.num_nodes)
        # :meth:`_pick` holds ``gpus`` on the fewest nodes, m, exactly where a block's m freest nodes hold them: it
        # takes the freest first, and the remainder then fits the m-th. So the first such block, all at once.
        blocks = -(-self.num_nodes // block)
        free = np.zeros(blocks * block, dtype=np.int64)
        free[: self.num_nodes] = self.free
        freest = -np.sort(-free.reshape(blocks, block), axis=1)[:, : self.min_nodes(gpus)].sum(axis=1)
        fits = np.flatnonzero(freest >= gpus)
        if not len(fits):
            return None
        start = int(fits[0]) * block
        return self._pick(gpus, np.arange(start, min(start + block, self.num_nodes)))

    def take(self, place: Placement) -> None:
        """Mark ``place``'s GPUs used."""
        free = self.free
        for node, n in place.nodes:
            left = int(free[node]) - n
            assert left >= 0, "a placement takes GPUs that are not free"
            free[node] = left
            if left:
                heapq.heappush(self._by_free[left], node)
        self.free_gpus -= place.gpus

    def give(self, place: Placement) -> None:
        """Return ``place``'s GPUs to the pool."""
        free = self.free
        for node, n in place.nodes:
            now = int(free[node]) + n
            assert now <= self.gpus_per_node, "a placement returns more GPUs than a node has"
            free[node] = now
            heapq.heappush(self._by_free[now], node)
        self.free_gpus += place.gpus

    def spans(self, place: Placement) -> tuple[int, ...]:
        """Span of each tier as the job sees it: a tier whose blocks the job spreads over shrinks to the fewest GPUs
        the job holds in one of them, rounded down to a power of two (plait's groups are aligned powers of two);
        the outermost tier keeps its span."""
        if len(place.nodes) == 1:  # one node lies in one block of every tier: each keeps its span
            return self._native_spans
        spans = self._spans.get(place.nodes)
        if spans is None:
            spans = self._spans[place.nodes] = self._spread_spans(place)
        return spans

    def _spread_spans(self, place: Placement) -> tuple[int, ...]:
        """:meth:`spans` of a placement over several nodes, computed."""
        tiers = self.cluster.tiers
        out = []
        for tier, nodes_per_block in zip(tiers[:-1], self.tier_nodes[:-1], strict=True):
            held: dict[int, int] = {}
            for node, n in place.nodes:
                held[node // nodes_per_block] = held.get(node // nodes_per_block, 0) + n
            out.append(tier.span_gpus if len(held) == 1 else min(tier.span_gpus, _floor_power_of_two(min(held.values()))))
        return (*out, tiers[-1].span_gpus)

    def native_spans(self) -> tuple[int, ...]:
        """The tiers' own spans (a consolidated job's view)."""
        return self._native_spans
