"""The elastic policy's allocation over arrays (:class:`plait.schedule.elastic.Elastic`): the same choices as the
greedy it states — smallest sizes first-fit in arrival order, then the growth step with the best gain per added GPU
while GPUs remain — computed with numpy over every active job at once instead of a Python heap.

Why it is the same: a job's next step enters the heap only once its previous step is taken, so a step whose own key
beats its predecessor's is popped right after it. Sorting every step once by (the running worst key along its
job's chain, job index, next size) therefore gives the heap's pop order, ties included; walking that order, a step
that does not fit the GPUs left is dropped with every later step of its job (the heap never pushes them), and free
GPUs only shrink; since a chain's sizes at least double at each step, each step adds more GPUs than the one before
it, so the steps after a dropped one cannot fit either, and the walk is a plain first fit
(:func:`plait.schedule.fit.greedy_fit`). ``tests/test_schedule_properties.py`` checks this against the heap on
random jobs. A job's steps and keys are fixed once it is seen, so the table keeps every seen job's steps in that
order as it records them (a pass then filters them to the jobs given GPUs instead of sorting them again), and drops
a job's steps when it completes (:meth:`ChainTable.remove`): when every active job gets its smallest size, as it
does while the cluster is not oversubscribed, the steps held are exactly theirs and a pass walks them unfiltered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from plait.schedule.fit import greedy_fit, summed_fit

JOB_SHIFT = 32
"""A step's (job, next size) packed as ``job << JOB_SHIFT | next size``: sizes stay below 2^32 GPUs."""


@dataclass
class ChainTable:
    """Per job index: its smallest size, and its growth steps (next size, added GPUs, heap key) along its chain;
    and every recorded job's steps in heap order (key, job, next size)."""

    smallest: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Smallest size (0: not yet known)."""
    count: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Steps along the chain from the smallest size (the chain stops at the first size that does not gain)."""
    given: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    """Per job: whether the allocation being computed gives it GPUs (cleared after use)."""
    allocated: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Per job: the GPUs the allocation being applied gives it, 0 outside it (``Elastic.schedule``'s)."""
    step_key: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """Recorded steps' heap keys (minus the gain per added GPU, raised to the predecessor's where that is worse),
    ascending; ties by :attr:`step_packed`."""
    step_packed: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Recorded steps' ``job << JOB_SHIFT | next size``, in the same order."""
    step_add: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Recorded steps' added GPUs, in the same order."""
    step_held: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """The running sum of :attr:`step_add` (kept with each insertion and removal: an addition over the steps after
    it, where a cumulative sum at every pass costs ~10 ns a step)."""
    num_steps: int = 0
    """Recorded steps held (the arrays above have room for more)."""
    chains: dict[int, list[tuple[float, int]]] = field(default_factory=dict)
    """Per recorded job with steps: each step's (key, packing), to find it again (:meth:`remove`)."""
    num_jobs: int = 0
    """Jobs recorded and not removed: when an allocation's jobs are that many, the steps held are all theirs."""

    def grow_to(self, jobs: int) -> None:
        """Room for job indices below ``jobs``."""
        have = len(self.smallest)
        if jobs > have:
            more = jobs - have
            self.smallest = np.concatenate([self.smallest, np.zeros(more, dtype=np.int64)])
            self.count = np.concatenate([self.count, np.zeros(more, dtype=np.int64)])
            self.given = np.concatenate([self.given, np.zeros(more, dtype=bool)])
            self.allocated = np.concatenate([self.allocated, np.zeros(more, dtype=np.int64)])

    def set(self, index: int, smallest: int, steps: dict[int, tuple[float, int]]) -> None:
        """Record job ``index``: its smallest size and its steps by size (``Elastic.steps``)."""
        self.smallest[index] = smallest
        size, k, worst, add = smallest, 0, -np.inf, 0
        while size in steps:
            key, after = steps[size]
            assert after - size > add, "each step along a chain adds more GPUs than the one before"
            worst, add = max(worst, key), after - size
            self._insert(worst, index << JOB_SHIFT | after, after - size)
            self.chains.setdefault(index, []).append((worst, index << JOB_SHIFT | after))
            size, k = after, k + 1
        self.count[index] = k
        self.num_jobs += 1

    def remove(self, index: int) -> None:
        """Drop job ``index``'s steps (it completed), each found where :meth:`_insert` put it."""
        for key, packed in self.chains.pop(index, ()):
            n = self.num_steps
            at = self._position(key, packed)
            assert at < n and self.step_packed[at] == packed, "a recorded step is held until its job is removed"
            gone = int(self.step_add[at])
            for column in (self.step_key, self.step_packed, self.step_add):
                column[at: n - 1] = column[at + 1: n]
            self.step_held[at: n - 1] = self.step_held[at + 1: n] - gone
            self.num_steps = n - 1
        self.num_jobs -= 1

    def _position(self, key: float, packed: int) -> int:
        """Where a step of ``key`` and ``packed`` is or goes in the held order (key, then packing)."""
        keys = self.step_key[: self.num_steps]
        low, high = keys.searchsorted(key, "left"), keys.searchsorted(key, "right")
        return int(low + self.step_packed[low:high].searchsorted(packed))

    def _insert(self, key: float, packed: int, add: int) -> None:
        n = self.num_steps
        if n == len(self.step_key):
            grow = max(64, n)
            self.step_key = np.concatenate([self.step_key, np.zeros(grow)])
            self.step_packed = np.concatenate([self.step_packed, np.zeros(grow, dtype=np.int64)])
            self.step_add = np.concatenate([self.step_add, np.zeros(grow, dtype=np.int64)])
            self.step_held = np.concatenate([self.step_held, np.zeros(grow, dtype=np.int64)])
        at = self._position(key, packed)
        for column, value in ((self.step_key, key), (self.step_packed, packed), (self.step_add, add)):
            column[at + 1: n + 1] = column[at:n]  # numpy copies overlapping slices safely
            column[at] = value
        self.step_held[at + 1: n + 1] = self.step_held[at:n] + add
        self.step_held[at] = (self.step_held[at - 1] if at else 0) + add
        self.num_steps = n + 1


def allocate(table: ChainTable, order: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """The jobs given GPUs and how many, for the active jobs ``order`` (indices in arrival order, each recorded), as
    Elastic.allocate's greedy."""
    jobs = allocate_into(table, order, capacity)
    sizes = table.allocated[jobs].copy()
    table.allocated[jobs] = 0
    return jobs, sizes


def allocate_into(table: ChainTable, order: np.ndarray, capacity: int) -> np.ndarray:
    """The jobs given GPUs, for the active jobs ``order`` (indices in arrival order, each recorded), their sizes
    written to :attr:`ChainTable.allocated` (the caller clears them)."""
    smallest = table.smallest[order]
    total = int(smallest.sum())
    if total <= capacity:  # every job gets its smallest size: the first fit's one run
        jobs, free = order, capacity - total
    else:
        taken, _, free = greedy_fit(smallest, capacity)  # smallest sizes, first fit in arrival order
        jobs, smallest = order[taken], smallest[taken]
    size = table.allocated
    size[jobs] = smallest
    if free > 0 and len(jobs) and table.num_steps:
        # A step that does not fit ends its job's chain in the heap greedy; here the later steps of that chain add
        # more GPUs still (:meth:`ChainTable.set`) while the GPUs left only shrink, so a plain first fit skips them.
        n = table.num_steps
        packed = table.step_packed[:n]
        if len(jobs) == table.num_jobs:  # the jobs recorded and not removed: every step held is theirs
            mine = None
            taken, _, _ = summed_fit(table.step_add[:n], table.step_held[:n], free)
        else:
            table.given[jobs] = True
            mine = table.given[packed >> JOB_SHIFT].nonzero()[0]  # the steps of jobs given GPUs, in heap order
            table.given[jobs] = False
            taken, _, _ = greedy_fit(table.step_add[:n][mine], free)
        steps = packed[taken if mine is None else mine[taken]]
        np.maximum.at(size, steps >> JOB_SHIFT, steps & ((1 << JOB_SHIFT) - 1))  # a job's largest taken size
    return jobs
