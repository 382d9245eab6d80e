"""``plait plan`` of a federated job: the method, local steps and participation with the least predicted time (or
clients' energy) to the target loss.

The space is declared in ``[plan]`` (methods x local steps x participation fractions). Each candidate is costed per
round (:func:`plait.workloads.federated.cost.round_cost`) and needs a multiplier, the rounds it takes to the target
loss (``[[rounds_to_loss]]``, measured by ``python -m plait.workloads.federated.converge``); time to loss = rounds x
round time, energy to loss = rounds x the round's clients' energy. Where a deadline drops clients, the multiplier is
the one measured at the participation that finishes, or below it (:func:`multiplier`). A candidate without a
multiplier, or whose clients cannot meet the deadline, is infeasible with that reason (counted, never ranked).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

from plait.errors import ConfigError
from plait.workloads.federated.cost import NoClientInTime, RoundCost, round_cost
from plait.workloads.federated.model import FederatedSpec, RoundsToLoss

Objective = Literal["time", "energy"]
NO_MULTIPLIER = ("no rounds-to-loss figure at this setting ([[rounds_to_loss]]; with a deadline: at or below the "
                 "participation that finishes)")


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One ranked setting."""

    cost: RoundCost
    """Its round."""
    rounds: int
    """Rounds to the target loss (its multiplier)."""
    source: str
    """Where the multiplier comes from."""

    @property
    def time_to_loss_s(self) -> float:
        """Rounds x the round's time."""
        return self.rounds * self.cost.round_s

    @property
    def energy_to_loss_j(self) -> float:
        """Rounds x the round's clients' board energy."""
        return self.rounds * self.cost.round_energy_j

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready summary."""
        return {"rounds": self.rounds, "time_to_loss_s": self.time_to_loss_s,
                "energy_to_loss_j": self.energy_to_loss_j, "multiplier_source": self.source} | self.cost.to_dict()


@dataclass(frozen=True, kw_only=True)
class FederatedPlan:
    """The ranked candidates and why the others were not ranked."""

    objective: Objective
    """What ranks them."""
    target_loss: float | None
    """The loss the multipliers reach (``None``: there are none)."""
    ranked: tuple[Candidate, ...]
    """Best first."""
    infeasible: dict[str, int]
    """Candidates not ranked, by reason."""

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready summary."""
        return {"objective": self.objective, "target_loss": self.target_loss,
                "ranked": [c.to_dict() for c in self.ranked], "infeasible": self.infeasible}


def multiplier(spec: FederatedSpec, cost: RoundCost) -> RoundsToLoss | None:
    """The measured rounds-to-loss of the round's method and local steps at its participation; where a deadline
    drops clients (``kept_fraction < 1``), at the largest measured participation not above the clients that finish
    (``participation x kept_fraction``; assumed: fewer clients per round never take fewer rounds); ``None``: none."""
    reach = cost.participation * cost.kept_fraction + 1e-9
    found = [r for r in spec.rounds_to_loss if (r.method, r.local_steps) == (cost.method, cost.local_steps)
             and (r.participation <= reach if cost.kept_fraction < 1 else abs(r.participation - reach) < 1e-6)]
    return max(found, key=lambda r: r.participation, default=None)


def candidate(spec: FederatedSpec, cost: RoundCost) -> Candidate | None:
    """The round with its multiplier (:func:`multiplier`), if one is measured."""
    found = multiplier(spec, cost)
    if found is None:
        return None
    note = "" if found.participation == cost.participation else (
        f" (taken at participation {found.participation:g}: the deadline leaves {cost.kept_fraction:.0%} of "
        f"{cost.participation:g})")
    return Candidate(cost=cost, rounds=found.rounds, source=found.source + note)


def plan_federated(spec: FederatedSpec, objective: Objective) -> FederatedPlan:
    """Every candidate of ``[plan]``, ranked by ``objective`` to the target loss (module docstring)."""
    targets = {r.target_loss for r in spec.rounds_to_loss}
    if len(targets) > 1:
        raise ConfigError(f"rounds_to_loss: every figure must reach the same target_loss (found {sorted(targets)})")
    ranked, infeasible = [], {}
    for method, tau, p in itertools.product(spec.plan.methods, spec.plan.local_steps, spec.plan.participation):
        try:
            cost = round_cost(spec, method, tau, p)
        except NoClientInTime:
            reason = f"no client finishes a round by deadline_s={spec.stragglers.deadline_s:g}"
            infeasible[reason] = infeasible.get(reason, 0) + 1
            continue
        found = candidate(spec, cost)
        if found is None:
            infeasible[NO_MULTIPLIER] = infeasible.get(NO_MULTIPLIER, 0) + 1
            continue
        ranked.append(found)
    ranked.sort(key=lambda c: c.time_to_loss_s if objective == "time" else c.energy_to_loss_j)
    return FederatedPlan(objective=objective, target_loss=next(iter(targets), None), ranked=tuple(ranked),
                         infeasible=infeasible)
