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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from plait.errors import ConfigError
from plait.schedule.elastic import Elastic
from plait.schedule.fit import greedy_fit
from plait.schedule.las import Las
from plait.schedule.simulate import Policy, Simulator
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


def preemptive_pass(sim: Simulator, now_s: float, idx: np.ndarray,
                    running_rank: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """Run the jobs first in rank order that fit the cluster's GPUs together; stop the running jobs outside that
    set, then start the chosen ones on the fewest nodes free (a chosen job the fragments cannot hold waits).

    A job's rank is (``running_rank`` or its ``queued_key``'s first field, arrival, trace position; integer
    ``running_rank``: small whole numbers, as LAS's queues, sorted as one packed key): the running
    jobs ``idx`` (:meth:`Simulator.running_indices`) with their ``running_rank`` are merged with the head of the
    ranked queue (:attr:`Simulator.ranked`), the head doubling until the walk runs out of GPUs inside it, so a pass
    costs the running jobs and the few waiting jobs that can win GPUs, not the whole queue. The running jobs ranked
    before every waiting job are kept without a sort: they fit together (they run now), so the walk takes each of
    them whatever follows; only the others are merged with the queue's head.

    Returns which of ``idx`` still run, and the jobs started (trace positions)."""
    if not sim.ranked:  # nothing waits: the running jobs fit together (they do now), nothing stops or starts
        return np.ones(len(idx), dtype=bool), []
    cols, head = sim.columns, QUEUE_HEAD
    first_rank, first_arrival, first_index = sim.ranked[0]
    arrival = cols.arrival_s[idx]
    ahead = (running_rank < first_rank) | ((running_rank == first_rank) & (
        (arrival < first_arrival) | ((arrival == first_arrival) & (idx < first_index))))
    late = np.flatnonzero(~ahead)  # positions in ``idx`` of the running jobs ranked after the queue's first
    budget = sim.pool.capacity_gpus - int(cols.asked_gpus[idx[ahead]].sum())
    late_index, late_rank = idx[late], running_rank[late]
    while True:
        queued = sim.ranked_head(head)
        index = np.concatenate([late_index, queued[:, 2].astype(np.int64)])
        order = _rank_order(np.concatenate([late_rank, queued[:, 0]]), cols.arrival_rank[index],
                            len(cols.arrival_rank) if running_rank.dtype.kind == "i" else 0)
        taken, walked, left = greedy_fit(cols.asked_gpus[index[order]], budget)
        in_head = np.flatnonzero(order >= len(late))
        # Exact once the GPUs ran out no later than the head's last waiting job: past it, jobs beyond the head
        # would interleave with the running ones.
        if head >= len(sim.ranked) or (left == 0 and walked <= in_head[-1] + 1):
            break
        # GPUs left over after the whole head: the walk most likely goes on to the queue's end, so take it all.
        head = len(sim.ranked) if left else 2 * head
    picked = order[taken]  # positions in ``index``, in rank order
    was_running = picked < len(late)
    stays = ahead.copy()
    stays[late[picked[was_running]]] = True
    for i in idx[~stays].tolist():  # in the order they started, as the running jobs are kept
        sim.stop(sim.states[i], now_s)
    started = []
    for i in index[picked[~was_running]].tolist():
        st = sim.states[i]
        place = sim.pool.packed(st.job.gpus)
        if place is not None:
            sim.start(st, place, now_s)
            started.append(i)
    return stays, started


def _rank_order(rank: np.ndarray, arrival_rank: np.ndarray, num_jobs: int) -> np.ndarray:
    """Positions sorted by (``rank``, ``arrival_rank``), the latter unique and below ``num_jobs``: where ``num_jobs``
    is given the ranks are small whole numbers (LAS's queues) and both pack into one exact key; else one sort by rank
    where no two ranks tie (as SRTF's times left rarely do), else both keys."""
    if num_jobs:
        return np.argsort(rank * num_jobs + arrival_rank)  # whole numbers below 2^53: exact, and unique
    order = np.argsort(rank)
    ranked = rank[order]
    if len(ranked) > 1 and (ranked[1:] == ranked[:-1]).any():
        return np.lexsort((arrival_rank, rank))
    return order


@dataclass(frozen=True, kw_only=True)
class Srtf:
    """Shortest predicted remaining time first, preemptive."""

    name: str = "srtf"
    """Policy name."""

    def queued_key(self, sim: Simulator, st: JobState) -> tuple[float, float, int]:
        """A waiting job's rank: its time left (fixed while it waits), then arrival."""
        return sim.remaining_s(st, st.since_s), st.job.arrival_s, st.index

    def schedule(self, sim: Simulator, now_s: float) -> None:
        """Keep the jobs with the least time left running."""
        if sim.ranked:
            idx = sim.running_indices()
            preemptive_pass(sim, now_s, idx, sim.columns.remaining(idx, now_s) / sim.columns.asked_tokens_per_s[idx])


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


POLICY_NAMES = ("fifo", "srtf", "las", "consolidate", "elastic")
"""Every policy ``plait schedule --policy`` takes (``all`` runs each)."""


def make_policy(name: str) -> Policy:
    """The policy called ``name`` with its documented settings."""
    table = {"fifo": Fifo, "srtf": Srtf, "las": Las, "consolidate": Consolidate, "elastic": Elastic}
    if name not in table:
        raise ConfigError(f"--policy={name!r} must be one of {', '.join(POLICY_NAMES)} or all")
    return table[name]()
