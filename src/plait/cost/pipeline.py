"""Pipeline schedules: micro-batches in flight and the time of one step's pipeline phase.

- In-flight activations: GPipe keeps all ``m`` micro-batches (Huang et al. 2019);
  1F1B keeps ``p - i`` on stage ``i`` (Narayanan et al. 2021, Sec. 2.2.1, PipeDream-
  Flush); the interleaved schedule multiplies the first stage's by ``1 + (p-1)/(p v)``
  (Korthikanti et al. 2022, Sec. 4.2.3); ZB-H1 keeps 1F1B's peak (Qi et al. 2023,
  "Zero Bubble Pipeline Parallelism", Sec. 3.1).
- Time: with per-micro-batch stage times ``t_i`` the steady state is paced by the
  slowest stage and fill/drain add the bubble ``(p-1)/v`` stage-times for 1F1B/GPipe/
  interleaved (Narayanan et al. 2021, Sec. 2.2.2, bubble fraction ``(p-1)/(v m)``);
  ZB-H1 shrinks the bubble to ``(p-1)(T_F + T_B - T_W)`` (Qi et al. 2023, Sec. 3.1),
  about one forward time per stage when input- and weight-gradient halves are equal.
"""

from __future__ import annotations

from dataclasses import dataclass

from plait.plan.plan import Plan


def inflight_micro_batches(plan: Plan, stage: int) -> float:
    """Micro-batches whose activations stage ``stage`` holds at its peak."""
    p, m = plan.pp, plan.num_micro_batches
    if p == 1:
        return 1.0
    if plan.schedule == "gpipe":
        return float(m)
    held = float(p - stage)
    if plan.schedule == "interleaved" and plan.vpp > 1:
        held += (p - 1) / plan.vpp
    return min(held, float(m))


@dataclass(frozen=True)
class StageTime:
    """Per-micro-batch time of one pipeline stage."""

    forward_s: float
    """Forward pass (compute and exposed communication)."""
    backward_s: float
    """Backward pass including recomputation."""

    @property
    def total_s(self) -> float:
        """Forward plus backward."""
        return self.forward_s + self.backward_s


def pipeline_time_s(plan: Plan, stages: list[StageTime]) -> tuple[float, float]:
    """(busy time of the slowest stage over all micro-batches, bubble time) for one step."""
    m = plan.num_micro_batches
    slowest = max(s.total_s for s in stages)
    busy = m * slowest
    p = plan.pp
    if p == 1:
        return busy, 0.0
    mean = sum(s.total_s for s in stages) / len(stages)
    if plan.schedule == "zb-h1":
        bubble = (p - 1) * sum(s.forward_s for s in stages) / len(stages)
    else:
        bubble = (p - 1) / plan.vpp * mean
    return busy, bubble
