"""The planner of a GLM job: every split (:mod:`.cost`) at every pipeline depth, the fastest chosen with why.

The space is data, not loops: the methods of :data:`.cost.METHODS` times the micro-batch counts that divide the
batch into whole micro-batches (powers of two up to :data:`MAX_MICRO_BATCHES`, feature-partitioned methods only);
each candidate is feasible with its step time or refused with its reason, and refusals are counted by reason.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.workloads.glm.cost import METHODS, GlmCost, glm_cost
from plait.workloads.glm.model import GlmSpec

MAX_MICRO_BATCHES = 64
"""Deepest pipeline searched (assumed: past 64 micro-batches every stage sits at a kernel's floor)."""


def candidates(spec: GlmSpec, cluster: Cluster, ranks: int) -> list[GlmCost]:
    """Every method at every searched pipeline depth, on ``ranks`` ranks."""
    if not 1 <= ranks <= cluster.max_gpus:
        raise ConfigError(f"--gpus {ranks} must be between 1 and the {cluster.max_gpus} GPUs of {cluster.name}")
    depths = [m for m in (2 ** k for k in range(7)) if m <= MAX_MICRO_BATCHES and spec.batch % m == 0]
    return [glm_cost(spec, cluster, ranks, method, m) for method in METHODS
            for m in (depths if method != "data_parallel" else [1])]


@dataclass(frozen=True, kw_only=True)
class GlmPlan:
    """The ranked candidates of one GLM job and the choice."""

    spec: GlmSpec
    """The job."""
    cluster: str
    """The cluster's name."""
    ranked: tuple[GlmCost, ...]
    """Feasible candidates, fastest first (a host-bound tie: the faster device and network first)."""
    refused: dict[str, int]
    """Refused candidates, counted by reason."""
    reason: str
    """Why the first candidate wins, against the best of each other method."""

    @property
    def best(self) -> GlmCost:
        """The chosen candidate."""
        return self.ranked[0]

    def per_method(self) -> list[GlmCost]:
        """The fastest feasible candidate of each method, fastest first."""
        seen: dict[str, GlmCost] = {}
        for cost in self.ranked:
            seen.setdefault(cost.method, cost)
        return list(seen.values())

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready data."""
        return {"model": self.spec.name, "cluster": self.cluster, "ranks": self.best.ranks,
                "best": asdict(self.best), "reason": self.reason,
                "per_method": [asdict(c) for c in self.per_method()], "refused": self.refused,
                "candidates": len(self.ranked) + sum(self.refused.values())}


def _dominant(cost: GlmCost) -> str:
    if cost.host_s >= cost.device_s:
        return f"host-bound: issuing {cost.host_s * 1e6:.1f} us, device and network {cost.device_s * 1e6:.1f} us"
    terms = {"forward": cost.forward_s, "all-reduce": cost.comm_s, "backward": cost.backward_s,
             "update": cost.update_s}
    name = max(terms, key=lambda k: terms[k])
    return f"{name} {terms[name] * 1e6:.1f} us"


def _label(cost: GlmCost) -> str:
    return cost.method + (f" (m={cost.micro_batches})" if cost.micro_batches > 1 else "")


def explain(best: GlmCost, others: list[GlmCost], refused: dict[str, int]) -> str:
    """Why ``best`` wins: its step against each other method's best, with that method's largest term."""
    parts = [f"{_label(best)} {best.step_s * 1e6:.1f} us/step ({_dominant(best)})"]
    parts += [f"{_label(o)} {o.step_s * 1e6:.1f} us ({o.step_s / best.step_s:.2f}x; {_dominant(o)})" for o in others]
    text = "; ".join(parts[:1]) + (" beats " + ", ".join(parts[1:]) if others else "")
    if refused:
        text += "; refused: " + "; ".join(f"{n} x {why}" for why, n in refused.items())
    return text


def plan_glm(spec: GlmSpec, cluster: Cluster, ranks: int) -> GlmPlan:
    """Rank every candidate on ``ranks`` ranks (module docstring)."""
    found = candidates(spec, cluster, ranks)
    ranked = tuple(sorted((c for c in found if not c.why_not), key=lambda c: (c.step_s, c.device_s, c.micro_batches)))
    refused = dict(Counter(f"{c.method}: {c.why_not}" for c in found if c.why_not))
    if not ranked:
        raise ConfigError(f"no way to train {spec.name} on {ranks} ranks of {cluster.name}: "
                          + "; ".join(refused))
    best = ranked[0]
    seen = {best.method}
    others = []
    for cost in ranked:
        if cost.method not in seen:
            seen.add(cost.method)
            others.append(cost)
    return GlmPlan(spec=spec, cluster=cluster.name, ranked=ranked, refused=refused,
                   reason=explain(best, others, refused))
