"""Scheduling policies, each one small pass over the simulator (:class:`plait.schedule.simulate.Policy`).

- :class:`Fifo`: first come, first served, strict head of line (no backfill: a job that does not fit blocks those
  behind it, as Philly's scheduler did, Jeon et al. ATC 2019 Sec. 2); placed on the fewest nodes free now.
- :class:`Srtf`: shortest remaining time first, preemptive, by the predicted time left at the requested size
  (Schrage 1968's SRPT rule; with GPUs, as Tiresias' "SRTF" baseline, Gu et al. NSDI 2019 Sec. 6).
- :class:`Las`: Tiresias' discretized two-dimensional least attained service (Gu et al. NSDI 2019 Sec. 4.2):
  attained service is GPUs x time; jobs sit in queues by thresholds of it and run lowest queue first, FIFO within a
  queue, preempting. Tiresias' starvation guard (promotion after long waits) is not modelled.
- :class:`Consolidate`: network-aware placement with delay scheduling (the 001-13 scheduler, arXiv 2401.16492;
  delay scheduling, Zaharia et al. EuroSys 2010): a job waits up to :attr:`Consolidate.delay_s` for a placement on
  the fewest nodes inside one block of the network, letting jobs behind it go ahead, then takes any placement.
  The 001-13 auto-tuner of the delay is not modelled.
- Elastic resizing (Pollux, Sia): :mod:`plait.schedule.elastic`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from plait.errors import ConfigError
from plait.schedule.simulate import Policy, Simulator
from plait.schedule.state import JobState


@dataclass(frozen=True, kw_only=True)
class Fifo:
    """First come, first served; head of line blocks."""

    name: str = "fifo"
    """Policy name."""

    def schedule(self, sim: Simulator, now_s: float) -> None:
        """Start queued jobs in order until one does not fit."""
        for st in list(sim.queued.values()):
            place = sim.pool.packed(st.job.gpus)
            if place is None:
                return
            sim.start(st, place, now_s)


def preemptive_pass(sim: Simulator, now_s: float, key: Callable[[JobState], tuple[float, ...]]) -> None:
    """Run the jobs first in ``key`` order that fit the cluster's GPUs together; stop the running jobs outside
    that set, then start the chosen ones on the fewest nodes free (a chosen job the fragments cannot hold waits)."""
    chosen, budget = set(), sim.pool.capacity_gpus
    for st in sorted([*sim.running.values(), *sim.queued.values()], key=key):
        if st.job.gpus <= budget:
            chosen.add(st.index)
            budget -= st.job.gpus
    for st in [s for s in sim.running.values() if s.index not in chosen]:
        sim.stop(st, now_s)
    for st in sorted([s for s in sim.queued.values() if s.index in chosen], key=key):
        place = sim.pool.packed(st.job.gpus)
        if place is not None:
            sim.start(st, place, now_s)


@dataclass(frozen=True, kw_only=True)
class Srtf:
    """Shortest predicted remaining time first, preemptive."""

    name: str = "srtf"
    """Policy name."""

    def schedule(self, sim: Simulator, now_s: float) -> None:
        """Keep the jobs with the least time left running."""
        preemptive_pass(sim, now_s, lambda st: (sim.remaining_s(st, now_s), st.job.arrival_s, st.index))


@dataclass(frozen=True, kw_only=True)
class Las:
    """Tiresias' discretized 2D-LAS."""

    thresholds_gpu_s: tuple[float, ...] = (3_600.0, 36_000.0)
    """Attained service (GPU-seconds) at which a job moves down a queue (assumed: one and ten GPU-hours; Tiresias
    tunes them per cluster and finds two queues enough, Gu et al. NSDI 2019 Sec. 6)."""
    name: str = "las"
    """Policy name."""

    def queue(self, attained_gpu_s: float) -> int:
        """The queue a job with ``attained_gpu_s`` of service sits in (0 first)."""
        return sum(1 for t in self.thresholds_gpu_s if attained_gpu_s >= t)

    def schedule(self, sim: Simulator, now_s: float) -> None:
        """Lowest queue first, FIFO within one; wake when a running job crosses its next threshold."""
        preemptive_pass(sim, now_s, lambda st: (self.queue(st.attained(now_s)), st.job.arrival_s, st.index))
        crossings = [now_s + (t - st.attained(now_s)) / st.gpus for st in sim.running.values()
                     for t in self.thresholds_gpu_s if t > st.attained(now_s)]
        if crossings:  # a microsecond past the crossing, so that rounding cannot leave the job just short of it
            sim.wake(min(crossings) + 1e-6)


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
        waits = []
        for st in list(sim.queued.values()):
            if st.job.gpus > sim.pool.free_gpus:
                break
            place = sim.pool.consolidated(st.job.gpus)
            if place is None and now_s - st.waiting_since_s >= self.delay_s:
                place = sim.pool.packed(st.job.gpus)
            if place is not None:
                sim.start(st, place, now_s)
            else:
                waits.append(st.waiting_since_s + self.delay_s)
        if waits:
            sim.wake(max(now_s, min(waits)))


POLICY_NAMES = ("fifo", "srtf", "las", "consolidate", "elastic")
"""Every policy ``plait schedule --policy`` takes (``all`` runs each)."""


def make_policy(name: str) -> Policy:
    """The policy called ``name`` with its documented settings."""
    from plait.schedule.elastic import Elastic

    table = {"fifo": Fifo, "srtf": Srtf, "las": Las, "consolidate": Consolidate, "elastic": Elastic}
    if name not in table:
        raise ConfigError(f"--policy={name!r} must be one of {', '.join(POLICY_NAMES)} or all")
    return table[name]()
