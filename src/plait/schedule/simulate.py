"""The scheduling simulation: jobs arrive, a policy starts and stops them on the pool, each trains at its planned
speed, and completes when its tokens are trained.

It runs on plait's deterministic event kernel (:mod:`plait.events.kernel`, STYLE.md rule 10): events are ordered
by (time, priority, sequence); at one instant completions free GPUs first, then arrivals join the queue, then the
policy makes one pass over the cluster. A job's speed on its GPUs comes from :class:`SpeedModel` (plait's planner
for its size and placement); a job that stopped before pays its restart when it resumes
(:attr:`plait.schedule.speed.Speed.restart_s`), holding its GPUs meanwhile. The same trace and policy give the same
result, bit for bit.

:func:`simulate` pauses Python's cyclic garbage collector while it runs (as :mod:`timeit` does) and turns it back
on after, where it was on: the objects that live to the run's end (states, segments, events) were walked again at
each older-generation collection, and the run makes few reference cycles to free (after a 10,000-job elastic run of
``benchmarks/schedule_speed.py``'s trace, ``gc.collect()`` finds ~4,000 objects left by the cold run's 121 planner
searches and none by a warm run). Measured by timing ``simulate`` with the collector on and off, alternating, in one
process with the planner's answers memoised (2026-12-07, load ~1): 3.24 s CPU against 3.07-3.09 s.
"""

from __future__ import annotations

import bisect
import gc
import itertools
import math
from collections.abc import Callable, Iterator
from typing import Protocol

import numpy as np

from plait.errors import ConfigError
from plait.events.kernel import Kernel
from plait.schedule.columns import Columns
from plait.schedule.ordered import OrderedIndices
from plait.schedule.pool import Placement, Pool
from plait.schedule.result import JobResult, ScheduleResult, Segment
from plait.schedule.speed import Speed, SpeedModel
from plait.schedule.state import JobState
from plait.schedule.trace import TraceJob

COMPLETE, ARRIVE, PASS = 0, 1, 2
"""Event priorities at one instant."""


class Policy(Protocol):
    """A scheduling policy: one pass over the queue and the running jobs, by the simulator's primitives. Optional
    hooks, read once: ``queued_key`` (the simulator keeps the queue ranked by it, :attr:`Simulator.ranked`),
    ``joined_queue`` and ``completed`` (a policy keeping its own index of the jobs hears their changes)."""

    name: str

    def schedule(self, sim: Simulator, now_s: float) -> None:
        """Start, stop or resize jobs at ``now_s`` (and :meth:`Simulator.wake` for a later pass)."""


QueuedKey = Callable[["Simulator", JobState], tuple[float, float, int]]
"""A policy's rank of a waiting job: fixed while it waits, its trace index last (so keys are unique)."""
Observer = Callable[["Simulator", JobState], None]
"""A policy's hook told of one job's change."""


class Simulator:
    """One policy over one trace on one pool."""

    def __init__(self, jobs: tuple[TraceJob, ...], pool: Pool, speed: SpeedModel, policy: Policy) -> None:
        if not jobs:
            raise ConfigError("a schedule needs at least one job")
        self.pool, self.speed, self.policy = pool, speed, policy
        self.kernel = Kernel()
        self.states = [JobState(job=j, index=i, remaining_tokens=j.tokens) for i, j in enumerate(jobs)]
        self.columns = Columns(self.states)
        """The jobs' progress as arrays, for vectorized passes (mirrors :attr:`states`)."""
        self.queued: dict[int, JobState] = {}
        """Jobs waiting, in the order they joined the queue (arrival or preemption)."""
        self.running: dict[int, JobState] = {}
        """Jobs holding GPUs."""
        self.active: dict[int, JobState] = {}
        """Jobs arrived and not done, in order of arrival (the kernel runs arrivals by time, then trace position)."""
        self.ranked: list[tuple[float, float, int]] = []
        """Waiting jobs' keys in ascending order, kept with each join and leave when the policy has a
        ``queued_key`` (SRTF, LAS): a pass reads the queue in order instead of sorting it."""
        self._ranked_rows = np.empty((64, 3))
        """:attr:`ranked` as rows of floats, kept beside it in descending order (:meth:`ranked_head`): the jobs
        that start leave near the queue's head, which is the array's end, so a leave moves the few rows after it
        instead of the whole queue's."""
        self._queued_key: QueuedKey | None = getattr(policy, "queued_key", None)
        self._joined_queue: Observer | None = getattr(policy, "joined_queue", None)
        """A policy that keeps its own index of the jobs (LAS) hears each join of the queue (arrival or stop)..."""
        self._completed: Observer | None = getattr(policy, "completed", None)
        """... and each completion (starts and stops are its own)."""
        self._running_order = OrderedIndices(len(jobs), values=True)
        """:attr:`running`'s keys as an array (:meth:`running_indices`), each with a float (:meth:`running_values`)."""
        self._active_order = OrderedIndices(len(jobs))
        """:attr:`active`'s keys as an array (:meth:`active_indices`)."""
        self._segments: list[Segment] = []
        self._opened: dict[int, float] = {}
        self._passes: set[float] = set()

    # --- primitives the policies call -------------------------------------------------------------------------------
    def speed_at(self, st: JobState, gpus: int, place: Placement | None = None) -> Speed | None:
        """The job's plan on ``gpus`` GPUs at ``place`` (default: consolidated)."""
        spans = self.pool.spans(place) if place is not None else None
        return self.speed.at(st.job.model, gpus, spans)

    def remaining_s(self, st: JobState, now_s: float) -> float:
        """Predicted time left at its requested size, consolidated (SRTF's key)."""
        return st.remaining(now_s) / float(self.columns.asked_tokens_per_s[st.index])

    def start(self, st: JobState, place: Placement, now_s: float) -> None:
        """Run ``st`` on ``place`` from ``now_s``."""
        speed = self.speed_at(st, place.gpus, place)
        assert speed is not None and st.status == "queued", "start a queued job on a size it fits"
        self.pool.take(place)
        st.settle(now_s)
        st.status, st.place, st.speed, st.version, st.gpus = "running", place, speed, st.version + 1, place.gpus
        st.training_from_s = now_s + (speed.restart_s if st.ran_before else 0.0)
        st.first_start_s = now_s if st.first_start_s is None else st.first_start_s
        st.sizes.append(place.gpus)
        key = st.queued_key
        self._dequeue(st)
        self.running[st.index] = st
        self._running_order.append(st.index, math.inf if key is None else key[0])
        self._opened[st.index] = now_s
        self.columns.write(st)
        version = st.version
        self.kernel.at(st.finish_at(), lambda: self._complete(st, version), COMPLETE)

    def stop(self, st: JobState, now_s: float) -> None:
        """Stop ``st`` at ``now_s`` (it checkpoints and waits in the queue again)."""
        assert st.status == "running", "only a running job stops"
        st.settle(now_s)
        self._release(st, now_s)
        st.status, st.ran_before, st.preemptions = "queued", True, st.preemptions + 1
        st.waiting_since_s = now_s
        self.columns.write(st)
        self._enqueue(st)

    def ranked_head(self, count: int) -> np.ndarray:
        """The first ``count`` keys of :attr:`ranked` as a (jobs, 3) array of floats (a view: read it before the
        queue changes)."""
        n = len(self.ranked)
        return self._ranked_rows[n - min(count, n): n][::-1]

    def queued_in_order(self) -> Iterator[JobState]:
        """The waiting jobs in queue order, read a few at a time (a queue may hold tens of thousands of jobs and a
        pass stop at its head); the pass may start the job it was just given, and change the queue no other way."""
        kept, size = 0, 16
        while True:
            batch = list(itertools.islice(self.queued.values(), kept, kept + size))
            if not batch:
                return
            for st in batch:
                yield st
                kept += st.index in self.queued  # still waiting: ahead of the rest of the batch
            size *= 2

    def running_indices(self) -> np.ndarray:
        """Trace positions of the running jobs, in the order they started."""
        return self._running_order.array()

    def running_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(:meth:`running_indices`, a float per running job) as views, in the order they started (read them before
        a job starts or stops; the floats are written through). A job's float starts as the first field of its
        queue key when it started (``inf`` where the policy keys no queue): SRTF's time left then, an upper bound
        of its rank while it runs (:mod:`plait.schedule.srtf_ranks`), which the policy lowers as it reads ranks."""
        return self._running_order.view(), self._running_order.values()

    def active_indices(self) -> np.ndarray:
        """Trace positions of the jobs arrived and not done, in order of arrival."""
        return self._active_order.array()

    def wake(self, at_s: float) -> None:
        """Ask for a policy pass at ``at_s``."""
        if at_s not in self._passes:
            self._passes.add(at_s)
            self.kernel.at(at_s, lambda: self._pass(at_s), PASS)

    # --- events -----------------------------------------------------------------------------------------------------
    def _enqueue(self, st: JobState) -> None:
        self.queued[st.index] = st
        if self._joined_queue is not None:
            self._joined_queue(self, st)
        if self._queued_key is not None:
            st.queued_key = self._queued_key(self, st)
            at, n = bisect.bisect_right(self.ranked, st.queued_key), len(self.ranked)
            self.ranked.insert(at, st.queued_key)
            if n == len(self._ranked_rows):
                self._ranked_rows = np.concatenate([self._ranked_rows, np.empty_like(self._ranked_rows)])
            row = n - at  # its row, descending: the ``at`` keys below it move up one
            self._ranked_rows[row + 1: n + 1] = self._ranked_rows[row:n]  # numpy copies overlapping slices safely
            self._ranked_rows[row] = st.queued_key

    def _dequeue(self, st: JobState) -> None:
        del self.queued[st.index]
        if st.queued_key is not None:
            at = bisect.bisect_left(self.ranked, st.queued_key)
            assert self.ranked[at] == st.queued_key, "a waiting job's key is in the ranked queue"
            n = len(self.ranked)
            del self.ranked[at]
            row = n - 1 - at  # its row, descending: the ``at`` keys below it move down one
            self._ranked_rows[row: n - 1] = self._ranked_rows[row + 1: n]
            st.queued_key = None

    def _release(self, st: JobState, now_s: float) -> None:
        assert st.place is not None
        start = self._opened.pop(st.index)
        for node, gpus in st.place.nodes:
            self._segments.append(Segment(job_id=st.job.job_id, node=node, gpus=gpus, start_s=start, end_s=now_s))
        self.pool.give(st.place)
        del self.running[st.index]
        self._running_order.remove(st.index)
        st.place, st.speed, st.version, st.gpus = None, None, st.version + 1, 0

    def _complete(self, st: JobState, version: int) -> None:
        if version != st.version:
            return
        now = self.kernel.now
        st.settle(now)
        self._release(st, now)
        st.status, st.finish_s, st.remaining_tokens = "done", now, 0.0
        del self.active[st.index]
        self._active_order.remove(st.index)
        self.columns.write(st)
        if self._completed is not None:
            self._completed(self, st)
        self.wake(now)

    def _arrive(self, st: JobState) -> None:
        now = self.kernel.now
        job = st.job
        asked = self.speed_at(st, job.gpus) if job.gpus <= self.pool.capacity_gpus else None
        if asked is None:
            st.status = "rejected"
            return
        self.columns.asked_tokens_per_s[st.index] = asked.tokens_per_s
        st.waiting_since_s, st.since_s = now, now
        self.columns.write(st)
        self.active[st.index] = st
        self._active_order.append(st.index)
        self._enqueue(st)
        self.wake(now)

    def _pass(self, at_s: float) -> None:
        self._passes.discard(at_s)
        self.policy.schedule(self, at_s)

    def run(self, progress: Callable[[int, int], None] | None = None) -> ScheduleResult:
        """Simulate every job to completion (or rejection); ``progress`` hears (jobs arrived, jobs) as the
        simulated clock passes each arrival."""
        arrived = [0]

        def arrive(st: JobState) -> None:
            self._arrive(st)
            arrived[0] += 1
            if progress is not None:
                progress(arrived[0], len(self.states))

        for st in self.states:
            self.kernel.at(st.job.arrival_s, lambda st=st: arrive(st), ARRIVE)
        self.kernel.run()
        stuck = [st.job.job_id for st in self.states if st.status in ("queued", "running")]
        assert not stuck, f"jobs never completed: {stuck[:5]}"
        return ScheduleResult(policy=self.policy.name, capacity_gpus=self.pool.capacity_gpus,
                              gpus_per_node=self.pool.gpus_per_node, jobs=tuple(_result(st) for st in self.states),
                              segments=tuple(self._segments))


def _result(st: JobState) -> JobResult:
    deadline = st.job.deadline_s
    met = None if deadline is None else (st.finish_s is not None and st.finish_s <= deadline)
    return JobResult(job_id=st.job.job_id, status=st.status, arrival_s=st.job.arrival_s, first_start_s=st.first_start_s,
                     finish_s=st.finish_s, gpus=st.job.gpus, sizes=tuple(st.sizes), preemptions=st.preemptions,
                     deadline_met=met)


def simulate(jobs: tuple[TraceJob, ...], pool: Pool, speed: SpeedModel, policy: Policy,
             progress: Callable[[int, int], None] | None = None) -> ScheduleResult:
    """Run ``policy`` over ``jobs`` on ``pool`` (a fresh pool: it is consumed); ``progress``: see
    :meth:`Simulator.run`. A policy whose jobs share GPUs names its own simulator (``simulator``, a subclass)."""
    sim = getattr(policy, "simulator", Simulator)(jobs, pool, speed, policy)
    was_enabled = gc.isenabled()
    gc.disable()  # see the module docstring
    try:
        return sim.run(progress)
    finally:
        if was_enabled:
            gc.enable()
