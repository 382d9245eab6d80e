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
from plait.schedule.srtf_ranks import Arrivals, may_trail
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
"""Waiting jobs a preemptive pass first merges with the running ones (each later chunk of the queue is 4x the one
before)."""


def preemptive_pass(sim: Simulator, now_s: float, idx: np.ndarray, running_rank: np.ndarray, head: int = 0) -> None:
    """Run the jobs first in rank order that fit the cluster's GPUs together; stop the running jobs outside that
    set, then start the chosen ones on the fewest nodes free (the running jobs hold the GPUs they asked for, so the
    chosen ones fit the GPUs free once the others stop).

    A job's rank is (``running_rank`` or its ``queued_key``'s first field, arrival, trace position). The running
    jobs ``idx`` (:meth:`Simulator.running_indices`) ranked before every waiting job are kept without a sort: they
    fit together (they run now), so the walk takes each of them whatever follows. The others are walked merged with
    the ranked queue (:attr:`Simulator.ranked`) by :func:`_walk`. A caller that knows the queue's first ``head``
    jobs do not start, and the running jobs ranked before its next one stay (:class:`Arrivals`), walks from there:
    ``idx`` then need only hold the running jobs that may rank after that job."""
    if not sim.ranked:  # nothing waits: the running jobs fit together (they do now), nothing stops or starts
        return
    gpus = sim.columns.asked_gpus[idx]
    keep, starts = _walk(sim, (running_rank, idx, gpus), sim.pool.free_gpus + int(gpus.sum()), head)
    for i in idx[~keep].tolist():  # in the order they started
        sim.stop(sim.states[i], now_s)
    for i in starts.tolist():
        st = sim.states[i]
        place = sim.pool.packed(st.job.gpus)
        assert place is not None, "a chosen job fits the GPUs the stopped and unchosen jobs leave"
        sim.start(st, place, now_s)


def _walk(sim: Simulator, running: tuple[np.ndarray, np.ndarray, np.ndarray], budget: int,
          head: int) -> tuple[np.ndarray, np.ndarray]:
    """First fit over ``budget`` GPUs of the ``running`` jobs (ranks, trace positions, GPUs) merged with the
    ranked queue from its job ``head``, in rank order: (which running jobs are taken, a mask; the waiting jobs
    taken, trace positions in rank order).

    The queue is read in chunks from its head (:data:`QUEUE_HEAD` jobs, then 4x as many each time); the running jobs
    ranked after a chunk's last job wait for the next chunk, and the walk stops when no GPUs are left (the running
    jobs not walked stop). Inside a chunk the running jobs are not sorted: each is given its gap between the
    chunk's waiting jobs (:func:`_gaps`), and the walk goes from event to event (:func:`_walk_chunk`)."""
    rows = sim.ranked_head(len(sim.ranked))[head:]  # the queue's keys from ``head``, ascending (a view, read first)
    keep = np.zeros(len(running[0]), dtype=bool)
    starts: list[np.ndarray] = []
    ahead = None  # positions in ``running`` not yet walked (``None``: all)
    at, size = 0, QUEUE_HEAD  # ``rows[at:]``: the queue not yet walked
    while budget and (ahead is None or len(ahead) or at < len(rows)):
        chunk = rows[at: at + size]
        at, size = at + len(chunk), size * 4
        these = running if ahead is None else tuple(column[ahead] for column in running)
        gap = _gaps(chunk, these[0], these[1], sim.columns)
        final = at >= len(rows)
        whole, budget, taken, started = _walk_chunk(sim, chunk, gap, these, budget, final)
        kept = whole[gap]
        kept[taken] = True
        if ahead is None:
            keep = kept
        else:
            keep[ahead[kept]] = True
        starts.append(started)
        if final:  # no queue left: they were the walk's last gap, walked with the chunk
            break
        if budget:  # the running jobs ranked after the chunk's last waiting job go on to the next chunk
            beyond = gap == len(chunk)
            ahead = beyond.nonzero()[0] if ahead is None else ahead[beyond]
    if len(starts) == 1:
        return keep, starts[0]
    return keep, (np.concatenate(starts) if starts else np.zeros(0, dtype=np.int64))


def _gaps(chunk: np.ndarray, rank: np.ndarray, index: np.ndarray, cols: Columns) -> np.ndarray:
    """Per running job (``rank``, trace positions ``index``): how many of the waiting jobs ``chunk`` (key rows,
    ascending) rank before it, ties in rank broken by (arrival, trace position) as the queue's keys."""
    ranks = chunk[:, 0]
    gap = ranks.searchsorted(rank, "left")
    if not len(ranks):
        return gap
    # A tie: the first waiting job not ranked before a running one has its rank (where every waiting job ranks
    # before it, clipping reads the last, whose rank is below its own). One gather, not a second binary search
    # of the running jobs' ranks, which come unsorted (in the order they started).
    tied = ranks.take(gap, mode="clip") == rank
    if not tied.any():  # a waiting and a running job of equal rank: rare
        return gap
    for t in tied.nonzero()[0].tolist():
        i = int(index[t])
        key = (float(rank[t]), float(cols.arrival_s[i]), i)
        while gap[t] < len(chunk) and (chunk[gap[t], 0], chunk[gap[t], 1], int(chunk[gap[t], 2])) < key:
            gap[t] += 1
    return gap


def _walk_chunk(sim: Simulator, chunk: np.ndarray, gap: np.ndarray, running: tuple[np.ndarray, np.ndarray,
                                                                                  np.ndarray], budget: int,
                final: bool) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """First fit over the merged order gap 0, waiting job 0, gap 1, ..., waiting job k-1, gap k (gap k only when
    ``final``: the chunk ends the queue) of the waiting jobs ``chunk`` and the ``running`` jobs (ranks, trace
    positions, GPUs) in their ``gap``: (per gap, whether all its running jobs are taken; the GPUs left; the
    positions in ``running`` taken one by one; the waiting jobs taken, in rank order).

    A gap's running jobs all fit while the GPUs left hold their sum, in whatever order, so one running sum over the
    gaps (no sort) says how far the walk goes unchanged: to the first waiting job that fits once the gaps before
    it are taken, or to the first gap that does not fit whole, whichever comes first. The walk jumps there, takes
    that job or walks that gap's running jobs one by one in rank order (the only ones sorted), and goes on."""
    (rank, index, gpus), k = running, len(chunk)
    queued = chunk[:, 2].astype(np.int64)
    last = k + 1 if final else k  # gaps walked here
    sums = np.bincount(gap, weights=gpus, minlength=k + 1)[:last].astype(np.int64).cumsum()
    need = sums[:k] + sim.columns.asked_gpus[queued]  # GPUs through waiting job m, were it the first taken
    whole = np.zeros(k + 1, dtype=bool)
    taken, started, split = [], [], []
    at, base = 0, 0  # gaps from ``at`` on not walked; ``base``: ``sums`` up to them (the GPUs left not counted)
    while budget and at < last:
        top = budget + base
        over = int(sums.searchsorted(top, "right"))  # the first gap that does not fit whole
        fits = (need[at: min(over, k)] <= top).nonzero()[0]
        if len(fits):  # a waiting job fits after the gaps before it
            j = at + int(fits[0])
            whole[at: j + 1] = True
            budget, base = top - int(need[j]), int(sums[j])
            started.append(int(queued[j]))
            at = j + 1
            continue
        whole[at: over] = True
        budget = top - (int(sums[over - 1]) if over else 0)
        if over == last:
            break
        members = (gap == over).nonzero()[0]  # gap ``over``'s running jobs, in rank order
        members = members[_rank_order(rank[members], index[members], sim.columns)]
        fit, _, budget = greedy_fit(gpus[members], budget)
        taken.append(members[fit])
        split.append(over)
        at, base = over, int(sums[over])
    whole[split] = False  # walked one by one
    return (whole, budget, np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64),
            np.array(started, dtype=np.int64))


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
    log: Arrivals = field(default_factory=Arrivals, compare=False, repr=False)
    """What changed since the last pass (:class:`plait.schedule.srtf_ranks.Arrivals`; one policy object serves one
    simulation)."""

    def queued_key(self, sim: Simulator, st: JobState) -> tuple[float, float, int]:
        """A waiting job's rank: its time left (fixed while it waits), then arrival."""
        return sim.remaining_s(st, st.since_s), st.job.arrival_s, st.index

    def joined_queue(self, sim: Simulator, st: JobState) -> None:
        """``st`` arrived (or stopped, in a pass)."""
        self.log.serve(sim).jobs.append(st)

    def completed(self, sim: Simulator, st: JobState) -> None:
        """``st`` is done."""
        self.log.serve(sim).quiet = False

    def schedule(self, sim: Simulator, now_s: float) -> None:
        """Keep the jobs with the least time left running (the running jobs ranked before every waiting one are
        kept without their ranks read: :mod:`plait.schedule.srtf_ranks`; arrivals that fit the free GPUs start
        without a walk: :class:`plait.schedule.srtf_ranks.Arrivals`)."""
        log = self.log.serve(sim)
        arrivals = log.fit_free(sim)
        if arrivals is not None:
            for st in arrivals:
                place = sim.pool.packed(st.job.gpus)
                assert place is not None, "arrivals that fit the free GPUs together each fit"
                sim.start(st, place, now_s)
        elif sim.ranked:
            first = log.first_change(sim)  # the queue's jobs before it stay waiting; the running jobs before it stay
            idx, rank = may_trail(sim, now_s, sim.ranked[first][0])
            preemptive_pass(sim, now_s, idx, rank, first)
        log.passed()


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
