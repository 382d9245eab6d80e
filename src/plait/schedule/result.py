"""What a scheduling simulation reports: each job's completion and queueing, and the cluster's figures.

Definitions (Tiresias, Gu et al. NSDI 2019, Sec. 6; Philly, Jeon et al. ATC 2019, Sec. 3): a job's completion time
(JCT) is its finish minus its arrival; its queueing delay is its first start minus its arrival; the makespan is the
last finish minus the first arrival; utilization is the GPU-seconds held by jobs (restarts included) over the
cluster's GPUs times the makespan. Over a heavy-tailed trace the makespan is set by its longest job, which may run
alone for days after the last arrival, so :attr:`ScheduleResult.utilization_arrivals` also gives the GPU-seconds
held between the first and the last arrival over the GPUs times that window.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from plait.schedule.pairing import Pairing


@dataclass(frozen=True, kw_only=True)
class Segment:
    """GPUs one job held on one node over one interval."""

    job_id: str
    """The job."""
    node: int
    """Node index."""
    gpus: int
    """GPUs held there."""
    start_s: float
    """From."""
    end_s: float
    """Until."""


@dataclass(frozen=True, kw_only=True)
class JobResult:
    """One job's outcome."""

    job_id: str
    """The job."""
    status: str
    """``done`` or ``rejected`` (no plan fits its model at its size on this cluster, or it asks for more GPUs)."""
    arrival_s: float
    """Submitted."""
    first_start_s: float | None
    """First ran (``None``: rejected)."""
    finish_s: float | None
    """Completed (``None``: rejected)."""
    gpus: int
    """GPUs asked for."""
    sizes: tuple[int, ...]
    """GPU counts it ran at, in order (one entry per start)."""
    preemptions: int
    """Times a policy stopped or resized it."""
    deadline_met: bool | None
    """Finished by its deadline (``None``: it has none)."""

    @property
    def jct_s(self) -> float:
        """Completion time."""
        assert self.finish_s is not None, "a rejected job has no completion time"
        return self.finish_s - self.arrival_s

    @property
    def queue_s(self) -> float:
        """Queueing delay before its first start."""
        assert self.first_start_s is not None, "a rejected job has no start"
        return self.first_start_s - self.arrival_s


@dataclass(frozen=True, kw_only=True)
class ScheduleResult:
    """One policy over one trace."""

    policy: str
    """Policy name."""
    capacity_gpus: int
    """GPUs in the cluster simulated."""
    gpus_per_node: int
    """GPUs per node."""
    jobs: tuple[JobResult, ...]
    """Every job of the trace, in trace order."""
    segments: tuple[Segment, ...]
    """Every allocation, per node (of GPUs a job shares with another, the job holding them: see ``pairs``)."""
    pairs: tuple[Pairing, ...] | None = None
    """Jobs paired on the same GPUs, in the order paired (``None``: the policy never shares GPUs)."""

    @property
    def done(self) -> tuple[JobResult, ...]:
        """Jobs that completed."""
        return tuple(j for j in self.jobs if j.status == "done")

    @property
    def makespan_s(self) -> float:
        """Last finish minus first arrival."""
        done = self.done
        return max(j.finish_s for j in done) - min(j.arrival_s for j in self.jobs) if done else 0.0  # type: ignore[type-var]

    @property
    def gpu_seconds(self) -> float:
        """GPU-seconds held by jobs."""
        return sum(s.gpus * (s.end_s - s.start_s) for s in self.segments)

    @property
    def utilization(self) -> float:
        """GPU-seconds held over capacity times makespan."""
        span = self.makespan_s
        return self.gpu_seconds / (self.capacity_gpus * span) if span > 0 else 0.0

    @property
    def arrival_window_s(self) -> tuple[float, float]:
        """First and last arrival: the window in which the trace offers its load."""
        return min(j.arrival_s for j in self.jobs), max(j.arrival_s for j in self.jobs)

    @property
    def utilization_arrivals(self) -> float:
        """GPU-seconds held inside the arrival window over capacity times the window (0 for a single instant):
        how busy the policy keeps the cluster while jobs come, which a long job finishing alone after the last
        arrival does not dilute."""
        first, last = self.arrival_window_s
        if last <= first:
            return 0.0
        held = sum(s.gpus * max(0.0, min(s.end_s, last) - max(s.start_s, first)) for s in self.segments)
        return held / (self.capacity_gpus * (last - first))

    def jcts_s(self) -> np.ndarray:
        """Completion times of the jobs that completed."""
        return np.array([j.jct_s for j in self.done])

    def summary(self) -> dict[str, float | int | str]:
        """The headline figures (``plait schedule``'s table and ``--json``)."""
        jct, queue = self.jcts_s(), np.array([j.queue_s for j in self.done])
        deadlines = [j.deadline_met for j in self.jobs if j.deadline_met is not None]
        return {"policy": self.policy, "jobs": len(self.jobs), "done": len(self.done),
                "rejected": len(self.jobs) - len(self.done),
                "mean_jct_s": float(jct.mean()) if len(jct) else 0.0,
                "median_jct_s": float(np.median(jct)) if len(jct) else 0.0,
                "p99_jct_s": float(np.percentile(jct, 99)) if len(jct) else 0.0,
                "mean_queue_s": float(queue.mean()) if len(queue) else 0.0,
                "makespan_s": self.makespan_s, "utilization": self.utilization,
                "utilization_arrivals": self.utilization_arrivals,
                "preemptions": sum(j.preemptions for j in self.jobs),
                "deadlines_missed": sum(1 for met in deadlines if not met), **self._pair_summary()}

    def _pair_summary(self) -> dict[str, float | int]:
        """Pairs formed and their mean predicted figures, for a policy that shares GPUs (else nothing)."""
        if self.pairs is None:
            return {}
        pairs = self.pairs
        gains = [p.gain for p in pairs]
        slowdowns = [s for p in pairs for s in (p.host_slowdown, p.guest_slowdown)]
        return {"pairs": len(pairs), "mean_pair_gain": float(np.mean(gains)) if pairs else 0.0,
                "mean_pair_slowdown": float(np.mean(slowdowns)) if pairs else 0.0}

    def utilization_over_time(self) -> tuple[np.ndarray, np.ndarray]:
        """(times, GPUs held from each time to the next): the step function of the cluster's use."""
        edges = sorted([(s.start_s, s.gpus) for s in self.segments] + [(s.end_s, -s.gpus) for s in self.segments])
        times = np.array([t for t, _ in edges])
        held = np.cumsum([g for _, g in edges])
        return times, held
