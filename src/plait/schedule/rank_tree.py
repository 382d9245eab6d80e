"""GPU counts at fixed rank positions, as a segment tree of sums and minima, so that a first fit over jobs in rank
order costs the jobs it changes and a logarithm, not the jobs it walks past (LAS's pass,
:mod:`plait.schedule.las`).

A textbook iterative segment tree (Cormen et al., *Introduction to Algorithms*, 3rd ed., problem 14-2's augmented
trees; the bottom-up array layout of de Berg et al., *Computational Geometry*, Sec. 10.3): leaf ``size + i`` holds
position ``i``'s GPUs (0 and "no job" where empty), each inner node the sum and the minimum of its two children.
Written by hand because its two queries (the first position where a prefix sum passes a budget; the first position
at or after another holding a job no larger than a budget) are not in numpy, and one pass asks a handful of them
(a Python loop of ~20 steps each), where any whole-array numpy operation would cost the cluster's jobs.
"""

from __future__ import annotations

NO_JOB = 1 << 62
"""A leaf's minimum where no job sits: larger than any budget."""


class RankTree:
    """GPUs per position ``0 .. positions - 1`` (0 where no job sits)."""

    def __init__(self, positions: int) -> None:
        size = 1
        while size < positions:
            size *= 2
        self.size = size
        self.total = [0] * (2 * size)
        """Sum of GPUs under each node (node 1 is the root; leaves from ``size``)."""
        self.least = [NO_JOB] * (2 * size)
        """Smallest job under each node (``NO_JOB`` where none)."""

    def set(self, position: int, gpus: int) -> None:
        """Put a job of ``gpus`` GPUs at ``position`` (0: take it away)."""
        node = position + self.size
        total, least = self.total, self.least
        total[node], least[node] = gpus, gpus if gpus else NO_JOB
        node >>= 1
        while node:
            left = 2 * node
            total[node] = total[left] + total[left + 1]
            least[node] = min(least[left], least[left + 1])
            node >>= 1

    def gpus(self, position: int) -> int:
        """GPUs of the job at ``position`` (0: none)."""
        return self.total[position + self.size]

    def prefix(self, position: int) -> int:
        """GPUs at positions below ``position``."""
        total, node, out = self.total, position + self.size, 0
        while node > 1:
            if node & 1:
                out += total[node - 1]
            node >>= 1
        return out

    def first_over(self, budget: int) -> int:
        """The first position whose job, with every job before it, holds more than ``budget`` GPUs (``size``
        where all fit): the positions before it are a first fit's unbroken run from the start."""
        total, node = self.total, 1
        if total[1] <= budget:
            return self.size
        while node < self.size:
            left = 2 * node
            if total[left] > budget:
                node = left
            else:
                budget -= total[left]
                node = left + 1
        return node - self.size

    def first_fitting(self, start: int, budget: int) -> int:
        """The first position at or after ``start`` whose job holds at most ``budget`` GPUs (-1: none)."""
        least, size = self.least, self.size
        node = start + size
        if least[node] <= budget:
            return start
        while True:  # climb while ``node`` is a right child or its right sibling holds no such job
            while node & 1:
                node >>= 1
                if node == 0:
                    return -1
            node += 1
            if least[node] <= budget:
                break
        while node < size:  # descend to the leftmost such leaf
            node *= 2
            if least[node] > budget:
                node += 1
        return node - size
