"""The communication groups a plan forms: how many ranks each holds and how far apart they sit.

Ranks are laid out as :mod:`plait.plan.plan` says: tp fastest, then cp, then dp (shard, then replicate), then pp,
Megatron-Core's default order ``tp-cp-ep-dp-pp``. A group of ``size`` ranks ``stride`` apart spans
``stride * (size - 1) + 1`` consecutive ranks, which decides the network tier it crosses
(:func:`plait.cost.collectives.group_link`).

Expert layers fold context parallelism into expert parallelism: Megatron-Core's ``initialize_model_parallel``
(megatron/core/parallel_state.py) builds a second rank generator for experts with ``tp = tp, ep = ep,
dp = world / (tp * ep * pp), cp = 1`` in the same order, so over the ``dp * cp`` ranks of a stage the ``ep``
ranks holding different experts are consecutive (``tp`` apart) and the ``dp * cp / ep`` ranks holding the same
experts (the expert-data-parallel group) are ``tp * ep`` apart; torchtitan's ``efsdp x ep`` mesh unflattens
``dp_shard * cp`` the same way. Expert tensor parallelism is taken equal to ``tp``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from plait.frozen import direct_init
from plait.plan.columns import PlanColumns, per_plan


@direct_init
@dataclass(frozen=True, kw_only=True)
class Group:
    """Every group of one kind in a plan: equal groups of ``size`` ranks, ``stride`` ranks apart (per row for
    columns, plain integers for one plan)."""

    size: Any
    """Ranks in one group."""
    stride: Any
    """Distance in ranks between neighbouring members."""

    @property
    def span(self) -> Any:
        """Consecutive ranks from a group's first member to its last."""
        return self.stride * (self.size - 1) + 1


def rank_groups(cols: PlanColumns) -> dict[str, Group]:
    """The groups of each plan of ``cols`` by name: ``tp``, ``cp``, ``dp`` (the data-parallel ranks of one cp
    rank), ``dp_cp`` (the ranks holding one model shard: the dense gradient all-reduce), ``ep`` (the expert
    all-to-all), ``expert_dp`` (the ranks holding the same experts: the expert-gradient reduction) and ``pp``.
    Needs ``ep`` to divide ``dp * cp`` (:data:`plait.plan.rules.RULES`)."""
    tp, cp, ep, pp = cols["tp"], cols["cp"], cols["ep"], cols["pp"]
    dp = cols.dp
    return {
        "tp": Group(size=tp, stride=1),
        "cp": Group(size=cp, stride=tp),
        "dp": Group(size=dp, stride=tp * cp),
        "dp_cp": Group(size=dp * cp, stride=tp),
        "ep": Group(size=ep, stride=tp),
        "expert_dp": expert_dp_group(cols),
        "pp": Group(size=pp, stride=tp * cp * dp),
    }


@per_plan
def expert_dp_group(cols: PlanColumns) -> Group:
    """The ranks holding the same experts (the expert-gradient reduction): ``dp * cp / ep`` ranks ``tp * ep`` apart,
    as in Megatron-Core's expert rank generator (order tp-cp-ep-dp-pp with cp folded into dp); the cost model's hot
    path asks for this group alone."""
    return Group(size=cols.dp * cols["cp"] // cols["ep"], stride=cols["tp"] * cols["ep"])
