"""The elastic policy's allocation over arrays (:class:`plait.schedule.elastic.Elastic`): the same choices as the
greedy it states — smallest sizes first-fit in arrival order, then the growth step with the best gain per added GPU
while GPUs remain — computed with numpy over every active job at once instead of a Python heap.

Why it is the same: a job's next step enters the heap only once its previous step is taken, so a step whose own key
beats its predecessor's is popped right after it. Sorting every step once by (the running worst key along its
job's chain, job index, next size) therefore gives the heap's pop order, ties included; walking that order, a step
that does not fit the GPUs left is dropped with every later step of its job (the heap never pushes them), and free
GPUs only shrink. ``tests/test_schedule_properties.py`` checks this against the heap on random jobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from plait.schedule.fit import greedy_fit

STEPS = 4
"""Most growth steps one job has: sizes from a quarter of its request to four times it (Elastic.options)."""


@dataclass
class ChainTable:
    """Per job index: its smallest size, and its growth steps (next size, added GPUs, heap key) along its chain."""

    smallest: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Smallest size (0: not yet known)."""
    count: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Steps along the chain from the smallest size (the chain stops at the first size that does not gain)."""
    nxt: np.ndarray = field(default_factory=lambda: np.zeros((0, STEPS), dtype=np.int64))
    """Size after each step."""
    add: np.ndarray = field(default_factory=lambda: np.zeros((0, STEPS), dtype=np.int64))
    """GPUs each step adds."""
    key: np.ndarray = field(default_factory=lambda: np.zeros((0, STEPS)))
    """Each step's heap key: minus its gain per added GPU, raised to its predecessor's where that is worse."""

    def grow_to(self, jobs: int) -> None:
        """Room for job indices below ``jobs``."""
        have = len(self.smallest)
        if jobs > have:
            more = jobs - have
            self.smallest = np.concatenate([self.smallest, np.zeros(more, dtype=np.int64)])
            self.count = np.concatenate([self.count, np.zeros(more, dtype=np.int64)])
            self.nxt = np.concatenate([self.nxt, np.zeros((more, STEPS), dtype=np.int64)])
            self.add = np.concatenate([self.add, np.zeros((more, STEPS), dtype=np.int64)])
            self.key = np.concatenate([self.key, np.full((more, STEPS), np.inf)])

    def set(self, index: int, smallest: int, steps: dict[int, tuple[float, int]]) -> None:
        """Record job ``index``: its smallest size and its steps by size (``Elastic.steps``)."""
        self.smallest[index] = smallest
        size, k, worst = smallest, 0, -np.inf
        while size in steps:
            key, after = steps[size]
            worst = max(worst, key)
            self.nxt[index, k], self.add[index, k], self.key[index, k] = after, after - size, worst
            size, k = after, k + 1
        self.count[index] = k


def allocate(table: ChainTable, order: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """The jobs given GPUs and how many, for the active jobs ``order`` (indices in arrival order), as
    Elastic.allocate's greedy."""
    taken, _, free = greedy_fit(table.smallest[order], capacity)  # smallest sizes, first fit in arrival order
    jobs = order[taken]
    size = table.smallest[jobs].copy()
    if free > 0 and len(jobs):
        counts = table.count[jobs]
        row = np.repeat(np.arange(len(jobs)), counts)
        step = np.arange(len(row)) - np.repeat(np.cumsum(counts) - counts, counts)
        job = jobs[row]
        nxt, add, key = table.nxt[job, step], table.add[job, step], table.key[job, step]
        by = np.lexsort((nxt, job, key))
        _walk(row[by], nxt[by], add[by], size, free)
    return jobs, size


def _walk(row: np.ndarray, nxt: np.ndarray, add: np.ndarray, size: np.ndarray, free: int) -> None:
    """Take the sorted steps in turn while each fits (``size[row]`` becomes ``nxt``); a step that does not fit ends
    its job's chain. Each round first ends every chain at its first step larger than the GPUs left (free only
    shrinks, so it will not fit when its turn comes), then takes the run of steps that fit one after another."""
    ahead = np.arange(len(row))
    while free > 0 and len(ahead):
        big = add[ahead] > free
        if big.any():
            end = np.full(len(size), len(row))
            np.minimum.at(end, row[ahead[big]], ahead[big])
            ahead = ahead[ahead < end[row[ahead]]]
            if not len(ahead):
                break
        total = np.cumsum(add[ahead])
        over = int(np.searchsorted(total, free, side="right"))
        done = ahead[:over]
        np.maximum.at(size, row[done], nxt[done])  # a job's steps only grow it: its largest taken size is its size
        free -= int(total[over - 1]) if over else 0
        if over == len(ahead):
            break
        stop = ahead[over]  # does not fit what is left: its job's chain ends here
        rest = ahead[over + 1:]
        ahead = rest[row[rest] != row[stop]]
