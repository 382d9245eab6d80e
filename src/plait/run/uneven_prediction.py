"""The prediction of an uneven ``plait run`` (``--slowdown``, ``--batch-split``, ``--stage-layers``): each
rank is a device group of one, rank r the run's cluster made ``slowdown[r]`` times slower
(:func:`plait.hardware.mixed.slowed`, what :mod:`plait.run.slowdown` emulates), all joined by the cluster's
innermost tier, and the run's split is a :class:`plait.plan.mixed.MixedPlan` that
:func:`plait.predict.mixed.estimate_mixed` costs. ``plait run`` and benchmarks/uneven_vs_predict.py both call
:func:`predict_uneven`.
"""

from __future__ import annotations

from dataclasses import replace

from plait.engine.catalog import get_engine
from plait.hardware.cluster import Cluster
from plait.hardware.mixed import DeviceGroup, MixedCluster, slowed
from plait.plan.mixed import GroupShare, MixedPlan, rank_share
from plait.plan.plan import Plan
from plait.predict.mixed import estimate_mixed, mixed_layout
from plait.predict.mixed_result import MixedEstimate
from plait.run.uneven import Uneven, layer_counts, rank_rows
from plait.workload.model import ModelSpec


def rank_cluster(cluster: Cluster, factors: tuple[float, ...]) -> MixedCluster:
    """One group of one rank per factor, ``rank<r>``, each ``cluster`` slowed by its factor, joined by
    ``cluster.tiers[0]`` (the tier the ranks of a one-node run talk over)."""
    one = replace(cluster, gpus_per_node=1, scale_up_domain_gpus=1)  # a group of one rank is a whole "node"
    groups = tuple(DeviceGroup(name=f"rank{r}", cluster=slowed(one, f), num_gpus=1) for r, f in enumerate(factors))
    label = ",".join(f"{f:g}" for f in factors)
    return MixedCluster(name=f"{cluster.name}, ranks slowed {label}", groups=groups, join=cluster.tiers[0],
                        source=f"{cluster.source}; ranks slowed {label} (plait.hardware.mixed.slowed)")


def mixed_plan(plan: Plan, uneven: Uneven, num_layers: int, groups: MixedPlan | None = None) -> MixedPlan | None:
    """The run as one share per rank: a data split where every rank is a data-parallel replica (with its group's
    own micro-batch and recomputation where ``groups``, the plan file's data split, gives them), a pipeline split
    where every rank is a stage (vpp=1); ``None`` for layouts with ranks that are neither."""
    if plan.num_gpus == plan.dp:
        rows = [rank_rows(uneven.batch_split, r, plan.global_batch, plan.dp) for r in range(plan.dp)]
        steps = uneven.local_steps or (1,) * plan.dp  # 1: the plan's own period (estimate_mixed)
        own = [rank_share(groups, r) if groups and groups.split == "data" else GroupShare(group="", num_gpus=1)
               for r in range(plan.dp)]
        shares = tuple(GroupShare(group=f"rank{r}", num_gpus=1, batch=hi - lo, local_steps=steps[r],
                                  micro_batch=own[r].micro_batch, recompute=own[r].recompute)
                       for r, (lo, hi) in enumerate(rows))
        return MixedPlan(plan=plan, split="data", shares=shares)
    if plan.num_gpus == plan.pp and plan.vpp == 1:
        layers = layer_counts(num_layers, plan.pp, uneven.stage_layers)
        shares = tuple(GroupShare(group=f"rank{r}", num_gpus=1, layers=(layers[r],)) for r in range(plan.pp))
        return MixedPlan(plan=plan, split="pipeline", shares=shares)
    return None


def predict_uneven(model: ModelSpec, cluster: Cluster, plan: Plan, uneven: Uneven,
                   groups: MixedPlan | None = None) -> MixedEstimate | None:
    """``estimate_mixed`` of the run on ranks slowed by ``uneven.slowdown`` (1 where none is given); ``None``
    where :func:`mixed_plan` cannot express the layout. ``groups``: the plan file's mixed plan, whose data split may
    give groups their own micro-batch and recomputation."""
    mixed = mixed_plan(mixed_layout(model, plan), uneven, model.num_layers, groups)
    if mixed is None:
        return None
    factors = uneven.slowdown or (1.0,) * plan.num_gpus
    return estimate_mixed(model, rank_cluster(cluster, factors), mixed, engine=get_engine("plait"))
