"""Scheduling policies, each one small pass over the simulator (:class:`plait.schedule.simulate.Policy`).

- :class:`Fifo`: first come, first served, strict head of line (no backfill: a job that does not fit blocks those
  behind it, as Philly's scheduler did, Jeon et al. ATC 2019 Sec. 2); placed on the fewest nodes free now.
- :class:`Srtf`: shortest remaining time first, preemptive, by the predicted time left at the requested size
  (Schrage 1968's SRPT rule; with GPUs, as Tiresias' "SRTF" baseline, Gu et al. NSDI 2019 Sec. 6).
- :class:`Las`: Tiresias' discretized two-dimensional least attained service (Gu et al. NSDI 2019 Sec. 4.2),
  :mod:`plait.schedule.las`.
- :class:`Consolidate`: network-aware placement with delay scheduling (the 001-13 scheduler, arXiv 2401.16492;
  delay scheduling, Zaharia et al. EuroSys 2010): a job waits up to :attr:`Consolidate.delay_s` for a placement on
  the fewest nodes inside one block of the network, letting jobs behind it go ahead, then takes any placement.
  The 001-13 auto-tuner of the delay is not modelled.
- Elastic resizing (Pollux, Sia): :mod:`plait.schedule.elastic`.
- Crossover sharing (CrossoverScheduler, arXiv 2103.07974): :mod:`plait.schedule.crossover`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from plait.errors import ConfigError
from plait.schedule.columns import Columns
from plait.schedule.crossover import Crossover
from plait.schedule.elastic import Elastic
from plait.schedule.fit import greedy_fit
from plait.schedule.las import Las
from plait.schedule.simulate import Policy, Simulator
from plait.schedule.srtf_ranks import RankBounds
from plait.schedule.state import JobState


@dataclass(frozen=True, kw_only=True)
class Fifo:
    """First come, first served; head of line blocks."""

    name: str = "fifo"
    """Policy name."""

    def schedule(self, sim: Simulator, now_s: float) -> None:
        """Start queued jobs in order until one does not fit."""
        for st in sim.queued_in_order():
            place = sim.pool.packed(st.job.gpus)
            if place is None:
                return
            sim.start(st, place, now_s)


QUEUE_HEAD = 64
"""Waiting jobs a preemptive pass first merges with the running ones (it doubles the head while it must)."""


def preemptive_pass(sim: Simulator, now_s: float, idx: np.ndarray, running_rank: np.ndarray) -> None:
    """Run the jobs first in rank order that fit the cluster's GPUs together; stop the running jobs outside that
    set, then start the chosen ones on the fewest nodes free (the running jobs hold the GPUs they asked for, so the
    chosen ones fit the GPUs free once the others stop).

    A job's rank is (``running_rank`` or its ``queued_key``'s first field, arrival, trace position): the running
    jobs ``idx`` (:meth:`Simulator.running_indices`) with their ``running_rank`` are merged with the head of the
    ranked queue (:attr:`Simulator.ranked`), so a pass costs the running jobs and the few waiting jobs that can win
    GPUs, not the whole queue. The running jobs ranked before every waiting job are kept without a sort: they fit
    together (they run now), so the walk takes each of them whatever follows. Of the others, only those ranked
    before the head's last job are merged with it: if the walk runs out of GPUs there, the rest stop; if not, the
    head becomes the whole queue, and the running jobs ranked after all of it are walked last, sorted only when
    they do not all fit what is left."""
    if not sim.ranked:  # nothing waits: the running jobs fit together (they do now), nothing stops or starts
        return
    cols, head = sim.columns, QUEUE_HEAD
    late = _after(sim.ranked[0], running_rank, idx, cols).nonzero()[0]  # positions in ``idx``
    late_index, late_rank = idx[late], running_rank[late]
    budget = sim.pool.free_gpus + int(cols.asked_gpus[late_index].sum())  # the GPUs not held by the jobs ahead
    while True:
        whole = head >= len(sim.ranked)
        queued = sim.ranked_head(head)
        tail = _after(sim.ranked[len(queued) - 1], late_rank, late_index, cols)
        inside = (~tail).nonzero()[0]  # positions in ``late`` ranked before the head's last job
        index = np.concatenate([late_index[inside], queued[:, 2].astype(np.int64)])
        order = _rank_order(np.concatenate([late_rank[inside], queued[:, 0]]), index, cols)
        taken, _, left = greedy_fit(cols.asked_gpus[index[order]], budget)
        if left == 0 or whole:
            break
        head = len(sim.ranked)  # GPUs left over after the head: the walk most likely goes on to the queue's end
    picked = order[taken]  # positions in ``index``, in rank order
    from_late = picked < len(inside)
    keep = np.zeros(len(late), dtype=bool)
    keep[inside[picked[from_late]]] = True
    rest = tail.nonzero()[0]
    if left and len(rest):  # the running jobs ranked after every waiting job, walked last
        gpus = cols.asked_gpus[late_index[rest]]
        if int(gpus.sum()) <= left:
            keep[rest] = True
        else:
            order = _rank_order(late_rank[rest], late_index[rest], cols)
            keep[rest[order[greedy_fit(gpus[order], left)[0]]]] = True
    for i in idx[late[~keep]].tolist():  # in the order they started, as the running jobs are kept
        sim.stop(sim.states[i], now_s)
    for i in index[picked[~from_late]].tolist():
        st = sim.states[i]
        place = sim.pool.packed(st.job.gpus)
        assert place is not None, "a chosen job fits the GPUs the stopped and unchosen jobs leave"
        sim.start(st, place, now_s)


def _after(key: tuple[float, float, int], rank: np.ndarray, idx: np.ndarray, cols: Columns) -> np.ndarray:
    """Which running jobs ``idx`` with ``rank`` are ranked after the waiting job's ``key`` (rank, arrival, trace
    position); arrivals are read only where ranks tie."""
    after = rank > key[0]
    tie = rank == key[0]
    if np.count_nonzero(tie):  # one C call: ``.any()`` first goes through numpy's Python wrapper
        arrival = cols.arrival_s[idx]
        after |= tie & ((arrival > key[1]) | ((arrival == key[1]) & (idx > key[2])))
    return after


def _rank_order(rank: np.ndarray, index: np.ndarray, cols: Columns) -> np.ndarray:
    """Positions sorted by (``rank``, arrival rank of the jobs ``index``), the latter unique: one sort by rank where
    no two ranks tie (as SRTF's times left rarely do), else both keys (arrival ranks read only then)."""
    order = rank.argsort()
    ranked = rank[order]
    if len(ranked) > 1 and np.count_nonzero(ranked[1:] == ranked[:-1]):
        return np.lexsort((cols.arrival_rank[index], rank))
    return order


@dataclass(frozen=True, kw_only=True)
class Srtf:
    """Shortest predicted remaining time first, preemptive."""

    name: str = "srtf"
    """Policy name."""
    bounds: RankBounds = field(default_factory=RankBounds, compare=False, repr=False)
    """Upper bounds of the running jobs' ranks (:mod:`plait.schedule.srtf_ranks`; one policy object serves one
    simulation)."""

    def queued_key(self, sim: Simulator, st: JobState) -> tuple[float, float, int]:
        """A waiting job's rank: its time left (fixed while it waits), then arrival."""
        return sim.remaining_s(st, st.since_s), st.job.arrival_s, st.index

    def schedule(self, sim: Simulator, now_s: float) -> None:
        """Keep the jobs with the least time left running (the running jobs ranked before every waiting one are
        kept without their ranks read: :mod:`plait.schedule.srtf_ranks`)."""
        if sim.ranked:
            idx, rank = self.bounds.serve(sim).may_trail(sim, now_s, sim.running_indices(), sim.ranked[0][0])
            preemptive_pass(sim, now_s, idx, rank)


@dataclass(frozen=True, kw_only=True)
class Consolidate:
    """Network-aware consolidation with delay scheduling."""

    delay_s: float = 600.0
    """Longest a job waits for a consolidated placement before taking any (assumed: ten minutes, short against
    the hours DL jobs run; 001-13 tunes it online)."""
    name: str = "consolidate"
    """Policy name."""

    def schedule(self, sim: Simulator, now_s: float) -> None:
        """In queue order: a consolidated placement if free; after the delay, any; a job that fits nowhere blocks."""
        waits, unplaceable = [], set()  # sizes with no consolidated place on the pool as it is now
        for st in sim.queued_in_order():
            if st.job.gpus > sim.pool.free_gpus:
                break
            place = None if st.job.gpus in unplaceable else sim.pool.consolidated(st.job.gpus)
            if place is None:
                unplaceable.add(st.job.gpus)
                if now_s >= st.waiting_since_s + self.delay_s:  # the wake's own sum: a difference can round short
                    place = sim.pool.packed(st.job.gpus)
            if place is not None:
                sim.start(st, place, now_s)
                unplaceable.clear()  # the pool changed
            else:
                waits.append(st.waiting_since_s + self.delay_s)
        if waits:
            sim.wake(max(now_s, min(waits)))


POLICY_NAMES = ("fifo", "srtf", "las", "consolidate", "elastic", "crossover")
"""Every policy ``plait schedule --policy`` takes (``all`` runs each)."""


def make_policy(name: str) -> Policy:
    """The policy called ``name`` with its documented settings."""
    table = {"fifo": Fifo, "srtf": Srtf, "las": Las, "consolidate": Consolidate, "elastic": Elastic,
             "crossover": Crossover}
    if name not in table:
        raise ConfigError(f"--policy={name!r} must be one of {', '.join(POLICY_NAMES)} or all")
    return table[name]()
