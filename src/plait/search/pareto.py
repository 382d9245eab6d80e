"""Minimum cost, time-to-train or energy for a token budget across GPU counts, and the Pareto front.

For each GPU count the planner finds the highest-throughput feasible plan (the least-energy one for the objective
energy); training ``tokens`` then takes ``tokens / throughput`` seconds, ``seconds x gpus x price`` dollars and
``steps x joules per step`` (:mod:`plait.cost.energy`). A point is on the front when no other point is at least as
good in GPUs, days, dollars and energy and better in one.
"""

from __future__ import annotations

from dataclasses import dataclass

from plait.cost.estimate import Estimate
from plait.errors import ConfigError
from plait.predict.goodput import goodput

SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True)
class Point:
    """The best plan at one GPU count, priced for a token budget."""

    gpus: int
    estimate: Estimate
    days: float
    dollars: float
    energy_j: float | None = None
    """Data-centre joules to train, failures included (``None``: the cluster's power is unknown)."""


def price(estimate: Estimate, tokens: float) -> Point:
    """Expected time and money to train ``tokens`` with ``estimate``'s plan, failures, checkpoints and restarts
    included (:mod:`plait.predict.goodput`): larger jobs fail more often, so the cheapest or fastest GPU count
    accounts for it."""
    share = goodput(estimate).goodput
    energy = estimate.energy_j(tokens)
    return Point(estimate.num_gpus, estimate, estimate.time_to_train_s(tokens) / share / SECONDS_PER_DAY,
                 estimate.cost_usd(tokens) / share, None if energy is None else energy / share)


def pareto_front(points: list[Point]) -> list[Point]:
    """Points not dominated in (gpus, days, dollars, energy where known), by GPU count."""
    def dominates(a: Point, b: Point) -> bool:
        ea, eb = (a.energy_j, b.energy_j) if a.energy_j is not None and b.energy_j is not None else (0.0, 0.0)
        no_worse = a.gpus <= b.gpus and a.days <= b.days and a.dollars <= b.dollars and ea <= eb
        return no_worse and (a.gpus < b.gpus or a.days < b.days or a.dollars < b.dollars or ea < eb)

    return sorted((p for p in points if not any(dominates(q, p) for q in points)), key=lambda p: p.gpus)


def choose(points: list[Point], objective: str, deadline_days: float | None, budget_usd: float | None) -> Point:
    """The cheapest point meeting the deadline ('cost'), the fastest within the budget ('time'), or the one of least
    energy within both ('energy')."""
    if not points:
        raise ConfigError("no GPU count in the range has a feasible plan; widen --gpus-range or allow tp across nodes")
    allowed = [p for p in points if (deadline_days is None or p.days <= deadline_days)
               and (budget_usd is None or p.dollars <= budget_usd)]
    if not allowed:
        fastest = min(points, key=lambda p: p.days)
        cheapest = min(points, key=lambda p: p.dollars)
        limits = []
        if deadline_days is not None:
            limits.append(f"deadline={deadline_days:g} days")
        if budget_usd is not None:
            limits.append(f"budget=${budget_usd:,.0f}")
        raise ConfigError(
            f"no GPU count meets {' and '.join(limits)}: the fastest ({fastest.gpus} GPUs) needs {fastest.days:.1f} "
            f"days and ${fastest.dollars:,.0f}, the cheapest ({cheapest.gpus} GPUs) ${cheapest.dollars:,.0f} in "
            f"{cheapest.days:.1f} days; relax the deadline to {fastest.days:.1f} days or the budget to "
            f"${cheapest.dollars:,.0f}")
    if objective == "energy":
        if any(p.energy_j is None for p in allowed):
            raise ConfigError("objective energy needs the cluster's power figures (a 'power' table or the "
                              "accelerator's tdp_w)")
        return min(allowed, key=lambda p: (p.energy_j, p.days))
    key = (lambda p: (p.dollars, p.days)) if objective == "cost" else (lambda p: (p.days, p.dollars))
    return min(allowed, key=key)
