"""Tiresias' discretized two-dimensional least attained service (Gu et al. NSDI 2019 Sec. 4.2): attained service is
GPUs x time; jobs sit in queues by thresholds of it and run lowest queue first, FIFO within a queue, preempting.
Tiresias' starvation guard (promotion after long waits) is not modelled.

A pass is a first fit over every active job in rank order (queue, then arrival): the jobs that fit the cluster's
GPUs together run, the running jobs outside them stop, the waiting jobs inside them start on the fewest nodes free.
A job's rank changes only when its service crosses a threshold, so the jobs sit at fixed positions (queue x jobs +
arrival rank) of a :class:`plait.schedule.rank_tree.RankTree`, moved at crossings: the first fit is the run of
positions whose GPUs sum within the cluster, then the few jobs after it that fit what is left, and a pass costs
the jobs it starts, stops or moves (times a logarithm), not the jobs running or waiting. Crossings come from a heap
of each running job's crossing time, read exactly (the float operations of :meth:`JobState.attained`) for the jobs
whose time is within rounding of the pass's.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass, field

from plait.schedule.rank_tree import RankTree
from plait.schedule.simulate import Simulator
from plait.schedule.state import JobState

ROUNDING = 1e-7
"""Relative width inside which a crossing time computed from a job's start may differ from the one computed at a
pass (both are sums of a few doubles, a few ulps apart; this is ~10^9 ulps): such jobs are read exactly."""


@dataclass
class LasBook:
    """One simulation's jobs at their rank positions (running and waiting), and the running jobs' crossings."""

    sim: Simulator | None = None
    """The simulation this book serves (a fresh book for another)."""
    tree: RankTree = field(default_factory=lambda: RankTree(1))
    """GPUs asked at each position (queue x jobs + arrival rank)."""
    running: list[int] = field(default_factory=list)
    """Positions of running jobs, ascending."""
    waiting: list[int] = field(default_factory=list)
    """Positions of waiting jobs, ascending."""
    position: list[int] = field(default_factory=list)
    """Per job index: its position (-1: not active)."""
    job_at: dict[int, int] = field(default_factory=dict)
    """Per occupied position: its job index."""
    started: list[int] = field(default_factory=list)
    """Per job index: the order of its last start (running jobs stop in the order they started)."""
    crossings: list[tuple[float, int, int, int]] = field(default_factory=list)
    """Heap of (time the job's service crosses its queue's threshold, job, its version, its queue) while running."""

    def reset(self, sim: Simulator, levels: int) -> None:
        """Serve ``sim``, whose jobs fall in ``levels`` queues."""
        n = len(sim.states)
        self.sim, self.tree, self.running, self.waiting = sim, RankTree(levels * n), [], []
        self.position, self.job_at, self.started, self.crossings = [-1] * n, {}, [0] * n, []
        self._arrival_rank = sim.columns.arrival_rank.tolist()
        self._starts = 0

    def key(self, index: int, level: int) -> int:
        """Position of job ``index`` in queue ``level``."""
        return level * len(self.position) + self._arrival_rank[index]

    def place(self, st: JobState, key: int, into: list[int]) -> None:
        """Put ``st`` at ``key`` (out of wherever it was), in ``into`` (:attr:`running` or :attr:`waiting`)."""
        old = self.position[st.index]
        if old >= 0:
            self._unlist(old)
        if old != key:
            if old >= 0:
                self.tree.set(old, 0)
                del self.job_at[old]
            self.tree.set(key, st.job.gpus)
            self.position[st.index], self.job_at[key] = key, st.index
        bisect.insort(into, key)

    def remove(self, key: int) -> None:
        """Take the job at ``key`` out."""
        self._unlist(key)
        self.tree.set(key, 0)
        self.position[self.job_at.pop(key)] = -1

    def _unlist(self, key: int) -> None:
        for side in (self.running, self.waiting):
            at = bisect.bisect_left(side, key)
            if at < len(side) and side[at] == key:
                del side[at]
                return
        raise AssertionError("an active job sits running or waiting")


@dataclass(frozen=True, kw_only=True)
class Las:
    """Tiresias' discretized 2D-LAS."""

    thresholds_gpu_s: tuple[float, ...] = (3_600.0, 36_000.0)
    """Attained service (GPU-seconds) at which a job moves down a queue (assumed: one and ten GPU-hours; Tiresias
    tunes them per cluster and finds two queues enough, Gu et al. NSDI 2019 Sec. 6)."""
    name: str = "las"
    """Policy name."""
    book: LasBook = field(default_factory=LasBook, compare=False, repr=False)
    """The jobs at their rank positions (filled as they arrive; one policy object serves one simulation)."""

    def queue(self, attained_gpu_s: float) -> int:
        """The queue a job with ``attained_gpu_s`` of service sits in (0 first)."""
        return sum(1 for t in self.thresholds_gpu_s if attained_gpu_s >= t)

    def _book(self, sim: Simulator) -> LasBook:
        if self.book.sim is not sim:
            self.book.reset(sim, len(self.thresholds_gpu_s) + 1)
        return self.book

    def joined_queue(self, sim: Simulator, st: JobState) -> None:
        """``st`` arrived or stopped: it waits at its queue's position."""
        book = self._book(sim)
        book.place(st, book.key(st.index, self.queue(st.attained_gpu_s)), book.waiting)

    def completed(self, sim: Simulator, st: JobState) -> None:
        """``st`` is done: it leaves its position."""
        self._book(sim).remove(self.book.position[st.index])

    def schedule(self, sim: Simulator, now_s: float) -> None:
        """Lowest queue first, FIFO within one; wake when a running job crosses its next threshold."""
        book = self._book(sim)
        self._cross(sim, book, now_s)
        if book.waiting:
            self._first_fit(sim, book, now_s)
        wake = self._next_crossing(sim, book, now_s)
        if wake is not None:  # a microsecond past the crossing, so that rounding cannot leave the job just short of it
            sim.wake(wake + 1e-6)

    def _thresholds(self) -> list[float]:
        return sorted(self.thresholds_gpu_s)

    def _push(self, book: LasBook, st: JobState, level: int) -> None:
        """Queue ``st``'s next crossing (running, in queue ``level``), if it has one."""
        thresholds = self._thresholds()
        if level < len(thresholds):
            at = st.since_s + (thresholds[level] - st.attained_gpu_s) / st.gpus
            heapq.heappush(book.crossings, (at, st.index, st.version, level))

    def _valid(self, sim: Simulator, book: LasBook, entry: tuple[float, int, int, int]) -> bool:
        _, index, version, level = entry
        st = sim.states[index]
        return st.version == version and st.status == "running" and book.position[index] == book.key(index, level)

    def _cross(self, sim: Simulator, book: LasBook, now_s: float) -> None:
        """Move every running job whose service has crossed a threshold by ``now_s`` to its new queue."""
        thresholds, heap, later = self._thresholds(), book.crossings, []
        while heap and heap[0][0] <= now_s + ROUNDING * (1.0 + abs(now_s)):
            entry = heapq.heappop(heap)
            if not self._valid(sim, book, entry):
                continue
            st = sim.states[entry[1]]
            level = bisect.bisect_right(thresholds, st.attained(now_s))
            if level == entry[3]:
                later.append(entry)  # within rounding of the crossing, not past it: read it again later
                continue
            book.place(st, book.key(st.index, level), book.running)
            self._push(book, st, level)
        for entry in later:
            heapq.heappush(heap, entry)

    def _first_fit(self, sim: Simulator, book: LasBook, now_s: float) -> None:
        """Run the jobs first in rank order that fit the cluster's GPUs together (each in turn, if it fits what
        the jobs before it left): stop the running jobs outside them, in the order they started, then start the
        waiting ones inside them in rank order on the fewest nodes free."""
        tree, budget = book.tree, sim.pool.capacity_gpus
        run_end = tree.first_over(budget)  # the unbroken run from the first rank
        budget -= tree.prefix(run_end) if run_end < tree.size else tree.total[1]
        picked, at = [], run_end + 1
        while budget > 0 and at < tree.size:
            at = tree.first_fitting(at, budget)
            if at < 0:
                break
            picked.append(at)
            budget -= tree.gpus(at)
            at += 1
        kept = set(picked)
        stops = [book.job_at[k] for k in book.running[bisect.bisect_left(book.running, run_end):] if k not in kept]
        starts = [book.job_at[k] for k in book.waiting[: bisect.bisect_left(book.waiting, run_end)]]
        starts += [book.job_at[k] for k in picked if sim.states[book.job_at[k]].status == "queued"]
        for index in sorted(stops, key=book.started.__getitem__):
            sim.stop(sim.states[index], now_s)  # :meth:`joined_queue` moves it to the waiting jobs
        for index in starts:
            st = sim.states[index]
            place = sim.pool.packed(st.job.gpus)
            if place is not None:
                sim.start(st, place, now_s)
                key = book.position[index]
                book.place(st, key, book.running)
                book.started[index], book._starts = book._starts, book._starts + 1
                self._push(book, st, key // len(book.position))

    def _next_crossing(self, sim: Simulator, book: LasBook, now_s: float) -> float | None:
        """The first time a running job's service crosses its queue's threshold, as read at ``now_s``."""
        heap = book.crossings
        while heap and not self._valid(sim, book, heap[0]):
            heapq.heappop(heap)
        if not heap:
            return None
        thresholds, near, edge = self._thresholds(), [], heap[0][0] * (1.0 + ROUNDING) + ROUNDING
        while heap and heap[0][0] <= edge:
            near.append(heapq.heappop(heap))
        best = None
        for entry in near:
            if self._valid(sim, book, entry):
                st = sim.states[entry[1]]
                at = now_s + (thresholds[entry[3]] - st.attained(now_s)) / st.gpus
                best = at if best is None else min(best, at)
                heapq.heappush(heap, entry)
        return best
