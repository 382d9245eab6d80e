"""Two data-parallel jobs time-sharing the same GPUs in a crossover manner: one computes while the other is in its
gradient-synchronization phase (CrossoverScheduler, Luo et al., arXiv 2103.07974, abstract: "Crossover
Synchronization ... allows multiple distributed deep learning applications to time-share the same GPU
alternately"; about 20% speed-up on ImageNet jobs).

The paper's own model of the paired step was not available here (only its abstract was read), so the period below
is **derived**, not quoted. Each job's step is split in two phases (:class:`StepSplit`): ``compute_s``, when it
needs the GPUs (forward, backward, recomputation, exposed in-step collectives, optimizer: everything but the
once-per-step gradient synchronization), and ``sync_s``, the exposed data-parallel synchronization at the end of
the step (``TimeBreakdown.dp_comm_s``), when its GPUs would idle. Two jobs A and B alternate: A computes, then
synchronizes while B computes, then B synchronizes while A computes its next step. In a steady state where each job
makes one step per period ``T``:

- the GPUs run one job's compute at a time: ``T >= c_A + c_B``;
- a job's next compute waits for its own synchronization: ``T >= c_A + s_A`` and ``T >= c_B + s_B``;
- the two jobs' synchronizations cross the same GPUs' links, each at the full bandwidth its ``s`` assumes, so
  they take turns too: ``T >= s_A + s_B``.

The schedule "A computes at 0, B at ``c_A``; each synchronizes as soon as its compute ends and the link is free"
meets all four bounds at once (A's link phase ends by ``c_A + s_A``, B's by ``max(c_A + c_B, c_A + s_A) + s_B``,
each before its job's next compute), so ``T = max(c_A + c_B, c_A + s_A, c_B + s_B, s_A + s_B)``. A job's slowdown
is ``T / (c + s)``; the pair's gain is the work the two jobs do per period over running their steps one after the
other on the same GPUs, ``(c_A + s_A + c_B + s_B) / T - 1`` (0 when neither synchronizes).

Memory: both jobs live on every GPU of the pair. While one computes, the other holds its weights, gradients,
optimizer state, buffers, CUDA context and allocator slack, but no activations (its backward is done), so each
job's peak plus the other's resident bytes must fit the GPU.

Assumed, not modelled: the synchronization a job hides under its own backward (not exposed) crosses the links
while the other job may synchronize; switching jobs costs nothing (both stay resident, as the paper's
time-sharing does); the jobs' GPU counts are equal (they share a placement).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from plait.cost.estimate import Estimate


@dataclass(frozen=True, kw_only=True)
class StepSplit:
    """One job's step as its two crossover phases and its memory per GPU."""

    compute_s: float
    """Seconds of the step the job needs its GPUs (everything but the exposed gradient synchronization)."""
    sync_s: float
    """Seconds of exposed data-parallel synchronization at the end of the step (its GPUs idle)."""
    peak_bytes: float
    """Bytes on its most loaded GPU at the peak (``MemoryBreakdown.total_bytes``)."""
    resident_bytes: float
    """Bytes it keeps on that GPU between steps: the peak less activations."""
    capacity_bytes: float
    """Device memory of the GPU."""

    def __post_init__(self) -> None:
        assert self.compute_s > 0 and self.sync_s >= 0, "a step computes for a positive time"
        assert 0 <= self.resident_bytes <= self.peak_bytes, "resident bytes are part of the peak"

    @property
    def step_s(self) -> float:
        """The job's step alone."""
        return self.compute_s + self.sync_s


def step_split(est: Estimate) -> StepSplit:
    """The crossover phases of an estimate: exposed data-parallel synchronization vs everything else."""
    sync = est.time.dp_comm_s
    mem = est.memory
    return StepSplit(compute_s=est.step_time_s - sync, sync_s=sync, peak_bytes=mem.total_bytes,
                     resident_bytes=mem.total_bytes - mem.activations_bytes, capacity_bytes=mem.capacity_bytes)


@dataclass(frozen=True, kw_only=True)
class PairCost:
    """Two jobs alternating on the same GPUs (module docstring)."""

    period_s: float
    """Seconds in which each job makes one step."""
    slowdown_a: float
    """Job A's step time paired over alone (>= 1)."""
    slowdown_b: float
    """Job B's, likewise."""
    gain: float
    """Steps of both per second paired over their steps one after the other on the same GPUs, less 1 (>= 0)."""
    fits: bool
    """Both jobs' memory fits each GPU together."""
    bound: str
    """Which bound sets the period: ``gpu`` (the computes), ``a`` or ``b`` (a job's own step), ``link`` (the
    synchronizations)."""


def pair_cost(a: StepSplit, b: StepSplit) -> PairCost:
    """The paired period, each job's slowdown, the gain and the memory fit of ``a`` and ``b`` time-sharing the same
    GPUs in a crossover manner (derived in the module docstring from the CrossoverScheduler alternation)."""
    bounds = {"gpu": a.compute_s + b.compute_s, "a": a.step_s, "b": b.step_s, "link": a.sync_s + b.sync_s}
    bound = max(bounds, key=lambda k: bounds[k])  # first of equals, in the order above
    period = bounds[bound]
    capacity = min(a.capacity_bytes, b.capacity_bytes)
    fits = a.peak_bytes + b.resident_bytes <= capacity and b.peak_bytes + a.resident_bytes <= capacity
    return PairCost(period_s=period, slowdown_a=period / a.step_s, slowdown_b=period / b.step_s,
                    gain=(a.step_s + b.step_s) / period - 1.0, fits=fits, bound=bound)
