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

import bisect
from dataclasses import dataclass, field

import numpy as np

from plait.schedule.fit import greedy_fit

JOB_SHIFT = 32
"""A step's (job, next size) packed as ``job << JOB_SHIFT | next size``: sizes stay below 2^32 GPUs."""


@dataclass
class ChainTable:
    """Per job index: its smallest size, and its growth steps (next size, added GPUs, heap key) along its chain;
    and every recorded job's steps in heap order (key, job, next size), each as one integer and its added GPUs."""

    smallest: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Smallest size (0: not yet known)."""
    count: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Steps along the chain from the smallest size (the chain stops at the first size that does not gain)."""
    given: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    """Per job: whether the allocation being computed gives it GPUs (cleared after use)."""
    allocated: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Per job: the GPUs the allocation being applied gives it, 0 outside it (``Elastic.schedule``'s). Between
    passes, each recorded job's smallest size (0 for the others), so that a pass writes only the jobs it grows or
    leaves out (:meth:`restore`), not every active job twice."""
    total: int = 0
    """The smallest sizes of the jobs recorded and not removed, summed."""
    changed: list[np.ndarray] = field(default_factory=list)
    """The jobs whose :attr:`allocated` the pass changed (:meth:`restore`)."""
    step_order: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Recorded steps in heap order, ascending, each as its key's rank among :attr:`keys` times :attr:`unit` plus
    its ``job << JOB_SHIFT | next size``: (key, job, next size) order in one integer, ties included, so a step's
    place is one bisection and its packing the low bits (``& (unit - 1)``)."""
    step_add: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Recorded steps' added GPUs, in the same order."""
    num_steps: int = 0
    """Recorded steps held (the arrays above have room for more)."""
    unit: int = 1 << (JOB_SHIFT + 1)
    """A power of two above every packing (room for the job indices of :meth:`grow_to`)."""
    keys: list[float] = field(default_factory=list)
    """The distinct keys of the steps recorded so far, ascending (each key's rank: its place here)."""
    rank: dict[float, int] = field(default_factory=dict)
    """Each of :attr:`keys`: its rank."""
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
            unit = 1 << (JOB_SHIFT + jobs.bit_length())
            if unit > self.unit:  # renumber the steps held: same order, the ranks in the larger unit
                order = self.step_order[: self.num_steps]
                order[:] = (order // self.unit) * unit + (order & (self.unit - 1))
                self.unit = unit
                self._check_room()

    def set(self, index: int, smallest: int, steps: dict[int, tuple[float, int]]) -> None:
        """Record job ``index``: its smallest size and its steps by size (``Elastic.steps``)."""
        self.smallest[index] = smallest
        size, k, worst, add = smallest, 0, -np.inf, 0
        chain: list[tuple[float, int]] = []
        while size in steps:
            key, after = steps[size]
            assert after - size > add, "each step along a chain adds more GPUs than the one before"
            worst, add = max(worst, key), after - size
            packed = index << JOB_SHIFT | after
            self._insert(self._order(worst, packed), add)
            chain.append((worst, packed))
            size, k = after, k + 1
        if chain:
            self.chains[index] = chain
        self.count[index] = k
        self.allocated[index] = smallest
        self.num_jobs, self.total = self.num_jobs + 1, self.total + smallest

    def remove(self, index: int) -> None:
        """Drop job ``index``'s steps (it completed), each found where :meth:`_insert` put it."""
        for key, packed in self.chains.pop(index, ()):
            n, order = self.num_steps, self.rank[key] * self.unit + packed
            at = int(self.step_order[:n].searchsorted(order))
            assert at < n and self.step_order[at] == order, "a recorded step is held until its job is removed"
            self.step_order[at: n - 1] = self.step_order[at + 1: n]  # numpy copies overlapping slices safely
            self.step_add[at: n - 1] = self.step_add[at + 1: n]
            self.num_steps = n - 1
        self.allocated[index] = 0
        self.num_jobs, self.total = self.num_jobs - 1, self.total - int(self.smallest[index])

    def restore(self) -> None:
        """:attr:`allocated` back to the smallest sizes after a pass."""
        for jobs in self.changed:
            self.allocated[jobs] = self.smallest[jobs]
        self.changed.clear()

    def _order(self, key: float, packed: int) -> int:
        """A step's place in heap order as one integer (:attr:`step_order`), ``key`` ranked among :attr:`keys`."""
        assert packed < self.unit, "job indices are below grow_to's"
        rank = self.rank.get(key)
        if rank is None:  # a key not seen before: the steps of every larger key move up one rank
            rank = bisect.bisect_left(self.keys, key)
            self.keys.insert(rank, key)
            self.rank = {k: r for r, k in enumerate(self.keys)}
            order = self.step_order[: self.num_steps]
            order[order >= rank * self.unit] += self.unit
            self._check_room()
        return rank * self.unit + packed

    def _check_room(self) -> None:
        assert len(self.keys) * self.unit < 1 << 63, "every step's order fits an int64"

    def _insert(self, order: int, add: int) -> None:
        n = self.num_steps
        if n == len(self.step_order):
            grow = max(64, n)
            self.step_order = np.concatenate([self.step_order, np.zeros(grow, dtype=np.int64)])
            self.step_add = np.concatenate([self.step_add, np.zeros(grow, dtype=np.int64)])
        at = int(self.step_order[:n].searchsorted(order))
        self.step_order[at + 1: n + 1] = self.step_order[at:n]  # numpy copies overlapping slices safely
        self.step_add[at + 1: n + 1] = self.step_add[at:n]
        self.step_order[at], self.step_add[at] = order, add
        self.num_steps = n + 1


def allocate(table: ChainTable, order: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """The jobs given GPUs and how many, for ``order`` (every job recorded and not removed, in arrival order), as
    Elastic.allocate's greedy."""
    jobs = allocate_into(table, order, capacity)
    sizes = table.allocated[jobs].copy()
    table.restore()
    return jobs, sizes


def allocate_into(table: ChainTable, order: np.ndarray, capacity: int) -> np.ndarray:
    """The jobs given GPUs, for ``order`` (every job recorded and not removed, in arrival order), their sizes
    written to :attr:`ChainTable.allocated` (the caller restores them, :meth:`ChainTable.restore`)."""
    assert len(order) == table.num_jobs, "the allocation covers every job recorded and not removed"
    size = table.allocated  # each job's smallest size (:meth:`ChainTable.restore`)
    if table.total <= capacity:  # every job gets its smallest size: the first fit's one run
        jobs, free = order, capacity - table.total
    else:
        taken, _, free = greedy_fit(table.smallest[order], capacity)  # smallest sizes, first fit in arrival order
        jobs = order[taken]
        out = np.ones(len(order), dtype=bool)
        out[taken] = False
        table.changed.append(order[out])
        size[table.changed[-1]] = 0
    if free > 0 and len(jobs) and table.num_steps:
        # A step that does not fit ends its job's chain in the heap greedy; here the later steps of that chain add
        # more GPUs still (:meth:`ChainTable.set`) while the GPUs left only shrink, so a plain first fit skips them.
        n, low = table.num_steps, table.unit - 1
        if len(jobs) == table.num_jobs:  # every step held is theirs
            taken, _, _ = greedy_fit(table.step_add[:n], free)
            steps = table.step_order[taken] & low
        else:
            packed = table.step_order[:n] & low
            table.given[jobs] = True
            mine = table.given[packed >> JOB_SHIFT].nonzero()[0]  # the steps of jobs given GPUs, in heap order
            table.given[jobs] = False
            taken, _, _ = greedy_fit(table.step_add[:n][mine], free)
            steps = packed[mine[taken]]
        grown = steps >> JOB_SHIFT
        np.maximum.at(size, grown, steps & ((1 << JOB_SHIFT) - 1))  # a job's largest taken size
        table.changed.append(grown)
    return jobs
