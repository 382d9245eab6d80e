"""Minimum cost or time-to-train for a token budget across GPU counts, and the Pareto front.

For each GPU count the planner finds the highest-throughput feasible plan; training
``tokens`` then takes ``tokens / throughput`` seconds and ``seconds x gpus x price``
dollars. A point is on the front when no other point is at least as good in GPUs, days
and dollars and better in one.
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


def price(estimate: Estimate, tokens: float) -> Point:
    """Expected time and money to train ``tokens`` with ``estimate``'s plan, failures, checkpoints and restarts
    included (:mod:`plait.predict.goodput`): larger jobs fail more often, so the cheapest or fastest GPU count
    accounts for it."""
    share = goodput(estimate).goodput
    return Point(estimate.num_gpus, estimate, estimate.time_to_train_s(tokens) / share / SECONDS_PER_DAY,
                 estimate.cost_usd(tokens) / share)


def pareto_front(points: list[Point]) -> list[Point]:
    """Points not dominated in (gpus, days, dollars), by GPU count."""
    def dominates(a: Point, b: Point) -> bool:
        no_worse = a.gpus <= b.gpus and a.days <= b.days and a.dollars <= b.dollars
        return no_worse and (a.gpus < b.gpus or a.days < b.days or a.dollars < b.dollars)

    return sorted((p for p in points if not any(dominates(q, p) for q in points)), key=lambda p: p.gpus)


def choose(points: list[Point], objective: str, deadline_days: float | None, budget_usd: float | None) -> Point:
    """The cheapest point meeting the deadline ('cost') or the fastest within the budget ('time')."""
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
    key = (lambda p: (p.dollars, p.days)) if objective == "cost" else (lambda p: (p.days, p.dollars))
    return min(allowed, key=key)
