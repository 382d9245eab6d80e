"""Why a plan wins, what the runner-up gives up, and what would make an infeasible request work."""

from __future__ import annotations

from dataclasses import dataclass

from plait.cost.estimate import Estimate
from plait.units import GIB


def bottleneck(est: Estimate) -> str:
    """The largest step-time component."""
    return max(est.time.items(), key=lambda item: item[1])[0]


def top_components(est: Estimate, k: int = 3) -> list[tuple[str, float, float]]:
    """(component, seconds, share of the step) of the ``k`` largest components."""
    items = sorted(est.time.items(), key=lambda item: -item[1])[:k]
    return [(name, value, value / est.step_time_s) for name, value in items if value > 0]


def why_winner(est: Estimate) -> str:
    """One sentence on where the winner's step time goes."""
    parts = ", ".join(f"{name} {value:.3g} s ({100 * share:.0f}%)" for name, value, share in top_components(est))
    text = f"step {est.step_time_s:.3g} s: {parts}; memory {est.memory.total_bytes / GIB:.1f} of " \
           f"{est.memory.capacity_bytes / GIB:.0f} GiB"
    if not est.plan.dp_sync.is_allreduce:
        text += (f"; {est.plan.dp_sync.spec} needs {est.steps_multiplier:.3g}x the all-reduce's steps "
                 f"({est.convergence.basis}), {est.step_time_s * est.steps_multiplier:.3g} s per all-reduce step")
    return text


def runner_up_gives_up(winner: Estimate, runner: Estimate) -> str:
    """What the runner-up loses against the winner, by component."""
    deltas = [(name, runner_value - dict(winner.time.items())[name]) for name, runner_value in runner.time.items()]
    worse = sorted((d for d in deltas if d[1] > 1e-9), key=lambda d: -d[1])[:2]
    better = sorted((d for d in deltas if d[1] < -1e-9), key=lambda d: d[1])[:1]
    slower = 100 * (winner.target_tokens_per_s / runner.target_tokens_per_s - 1)  # to target: steps multipliers in
    text = f"{runner.plan.describe()} is {slower:.1f}% slower"
    if runner.steps_multiplier != winner.steps_multiplier:
        text += f" to target (steps x {runner.steps_multiplier:.3g} vs {winner.steps_multiplier:.3g})"
    if worse:
        text += ": +" + ", +".join(f"{v:.3g} s {n}" for n, v in worse)
    if better:
        text += "; saves " + ", ".join(f"{-v:.3g} s {n}" for n, v in better)
    mem = (runner.memory.total_bytes - winner.memory.total_bytes) / GIB
    if abs(mem) > 0.05:
        text += f"; uses {abs(mem):.1f} GiB {'more' if mem > 0 else 'less'} memory"
    return text


@dataclass(frozen=True)
class Relaxation:
    """A change to the request and what it buys."""

    change: str
    """The change, e.g. 'allow tp across nodes' or 'double the GPUs to 128'."""
    best: Estimate | None
    """The best plan the change admits (``None``: still nothing fits)."""
