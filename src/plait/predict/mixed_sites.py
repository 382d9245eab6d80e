"""The slower tier of a mixed cluster: where the join between device groups is slower per GPU than a group's own
fabric, the groups are priced as sites joined by it, so that per-tier compression (:mod:`plait.sync.site_topk`,
:mod:`plait.sync.site_quantize`) can keep the groups' own fabrics exact and compress only the join.

A group's view (:func:`plait.hardware.mixed.group_view`) ends in the join tier; :func:`site_view` marks that tier as
a site boundary (``wide_area``, no egress price) when its per-GPU bandwidth is below the tier inside it, so the
site-aware cost (:func:`plait.cost.site_sync.site_costs`) sees each group as a site. Only site-aware methods are
priced on it: every other method keeps the flat view's cost, the layout plait's mixed runtime runs.
"""

from __future__ import annotations

from dataclasses import replace

from plait.cost.site_sync import adaptive_ratio
from plait.hardware.cluster import Cluster
from plait.hardware.mixed import DeviceGroup, MixedCluster, group_view


def site_view(cluster: MixedCluster, group: DeviceGroup, num_gpus: int) -> Cluster:
    """``group``'s view of a ``num_gpus``-rank job with the join marked as a site boundary where it is slower per GPU
    than the group's outermost tier inside it; the plain view otherwise (a job inside one group, a join as fast)."""
    view = group_view(cluster, group, num_gpus)
    if view is group.cluster or len(view.tiers) < 2:
        return view
    *inner, join = view.tiers
    if join.wide_area or join.bandwidth_gb_per_s_per_gpu >= inner[-1].bandwidth_gb_per_s_per_gpu:
        return view
    return replace(view, tiers=(*inner, replace(join, wide_area=True)))


def join_ratio(cluster: MixedCluster) -> float | None:
    """FusionLLM's ratio (:func:`plait.cost.site_sync.adaptive_ratio`) for the join of ``cluster``: the join's
    per-GPU bandwidth over the slowest group fabric inside it (the inside steps of a hierarchical all-reduce run at
    the slowest group's pace); ``None`` where the join is no slower than every group's fabric."""
    ratios = [adaptive_ratio(site_view(cluster, g, cluster.num_gpus)) for g in cluster.groups]
    known = [r for r in ratios if r is not None]
    return max(known) if len(known) == len(ratios) and known else None
