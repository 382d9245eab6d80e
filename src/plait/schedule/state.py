"""What the simulation knows about one job while it runs: progress in tokens, GPUs held, service attained."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from plait.schedule.pool import Placement
from plait.schedule.speed import Speed
from plait.schedule.trace import TraceJob

Status = Literal["queued", "running", "done", "rejected"]


@dataclass(kw_only=True)
class JobState:
    """One job's mutable state in a simulation (the simulation's own, never shared)."""

    job: TraceJob
    """The job as submitted."""
    index: int
    """Its position in the trace (ties break by it: deterministic)."""
    status: Status = "queued"
    """Where it is."""
    remaining_tokens: float = 0.0
    """Tokens left to train as of :attr:`since_s`."""
    place: Placement | None = None
    """GPUs held while running."""
    speed: Speed | None = None
    """Its plan on those GPUs while running."""
    since_s: float = 0.0
    """When :attr:`remaining_tokens` and :attr:`attained_gpu_s` were last brought up to date."""
    training_from_s: float = 0.0
    """When it trains again after a restart (it holds its GPUs from :attr:`since_s`)."""
    attained_gpu_s: float = 0.0
    """GPU-seconds held so far (Tiresias' attained service)."""
    waiting_since_s: float = 0.0
    """When it last joined the queue (arrival or preemption)."""
    first_start_s: float | None = None
    """When it first ran."""
    finish_s: float | None = None
    """When it completed."""
    ran_before: bool = False
    """It has run and stopped: it resumes from a checkpoint (restart cost)."""
    preemptions: int = 0
    """Times a policy stopped it."""
    sizes: list[int] = field(default_factory=list)
    """GPU counts it ran at, in order."""
    version: int = 0
    """Bumped whenever its allocation changes: older completion events are stale."""
    gpus: int = 0
    """GPUs held now (0 unless running; ``place.gpus``, kept as a number because every pass reads it)."""
    queued_key: tuple[float, float, int] | None = None
    """Its key in :attr:`plait.schedule.simulate.Simulator.ranked` while it waits (policies that rank the queue)."""

    def trained(self, now_s: float) -> float:
        """Tokens trained since :attr:`since_s`."""
        if self.speed is None:
            return 0.0
        return self.speed.tokens_per_s * max(0.0, now_s - max(self.since_s, self.training_from_s))

    def remaining(self, now_s: float) -> float:
        """Tokens left at ``now_s``."""
        return max(0.0, self.remaining_tokens - self.trained(now_s))

    def attained(self, now_s: float) -> float:
        """GPU-seconds held up to ``now_s``."""
        return self.attained_gpu_s + self.gpus * max(0.0, now_s - self.since_s)

    def settle(self, now_s: float) -> None:
        """Bring progress and service up to ``now_s``."""
        self.remaining_tokens = self.remaining(now_s)
        self.attained_gpu_s = self.attained(now_s)
        self.since_s = now_s

    def finish_at(self) -> float:
        """When it completes at its current speed (running only)."""
        assert self.speed is not None, "only a running job completes"
        return max(self.since_s, self.training_from_s) + self.remaining_tokens / self.speed.tokens_per_s
