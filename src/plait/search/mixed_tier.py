"""Per-tier compression on a mixed cluster whose device groups are joined by a slower tier
(:mod:`plait.predict.mixed_sites`): the mixed planner costs the best even split with the join compressed
(``site_topk``, ``site_quantize`` at FusionLLM's ratio and width for the join, :func:`plait.search.adaptive.specs_for`)
against the same layout with uniform compression (``topk``, ``quantize``), DiLoCo and the all-reduce, and says which
wins per all-reduce step and why (:func:`plait.search.adaptive.per_tier_verdict`).

Compressing methods need whole gradients, so each is costed on the even split's layout with whole replicas
(``dp_replicate = dp``, no sharding); the all-reduce is the even split itself. ``plait run`` lays a mixed plan's
groups out as one fabric (:mod:`plait.run.mixed_run`), so a per-tier plan is costed here, not ranked among the
plans it runs (:func:`plait.plan.mixed.run_refusal`).
"""

from __future__ import annotations

from dataclasses import replace

from plait.engine.engine import Engine
from plait.errors import ConfigError
from plait.hardware.mixed import MixedCluster
from plait.plan.convergence import convergence, table
from plait.plan.mixed import even_shares
from plait.plan.plan import Plan
from plait.predict.mixed_result import MixedEstimate
from plait.predict.mixed_sites import join_ratio
from plait.search.adaptive import per_tier_verdict, specs_for
from plait.search.mixed_split import fits_with, try_mixed
from plait.sync import SiteQuantize, SiteTopK, SyncMethod, parse
from plait.workload.model import ModelSpec


def compared_methods(ratio: float) -> list[SyncMethod]:
    """The per-tier methods at ``ratio``, their uniform counterparts (``topk`` at the same ratio, ``quantize`` at the
    same widths) and the DiLoCo settings with a steps multiplier."""
    tiered = list(specs_for(ratio))
    # each per-tier method's proxy is its compressor applied to every tier (the all-reduce where it is exact)
    uniform = [p for p in (m.convergence_proxy for m in tiered) if p is not None and not p.is_allreduce]
    diloco = [parse(s) for s in table() if s.startswith("diloco")]
    return [*tiered, *uniform, *(m for m in diloco if convergence(m).known)]


def whole_replicas(layout: Plan) -> list[Plan]:
    """``layout`` with whole, unsharded replicas (what a compressor needs), and, for a pipeline, the same with its
    stages folded into data parallelism (only the gradients then cross the join)."""
    whole = replace(layout, dp_replicate=layout.dp, dp_shard=1, sharding="none")
    if layout.pp == 1:
        return [whole]
    return [whole, replace(whole, pp=1, vpp=1, schedule="1f1b", dp_replicate=layout.dp * layout.pp)]


def one_replica_per_group(layout: Plan, groups: int) -> Plan:
    """``layout`` as one replica per group, sharded over the group (HSDP, ZeRO-3), the layout DiLoCo's figures hold
    for (a few replicas), where the replicas divide evenly; else ``layout``."""
    if layout.dp % groups or layout.dp == groups:
        return layout
    return replace(layout, dp_replicate=groups, dp_shard=layout.dp // groups, sharding="zero3")


def per_tier_mixed(model: ModelSpec, cluster: MixedCluster, evens: list[MixedEstimate], engine: Engine,
                   memory_margin: float) -> str | None:
    """Why per-tier compression on the join wins or not against uniform compression, DiLoCo and the all-reduce (the
    best of ``evens``, the even splits of each layout), each method at its best over the layouts, or why it was not
    tried; ``None`` where the join is no slower than every group's fabric."""
    ratio = join_ratio(cluster)
    if ratio is None or not evens:
        return None
    bests: dict[str, MixedEstimate] = {}

    def keep(est: MixedEstimate) -> None:
        name = est.plan.plan.dp_sync.name
        held = bests.get(name)
        if held is None or est.step_time_s * est.steps_multiplier < held.step_time_s * held.steps_multiplier:
            bests[name] = est

    for even in evens:
        if even.plan.plan.dp_sync.is_allreduce:
            keep(even)
        for whole in whole_replicas(even.plan.plan):
            for method in compared_methods(ratio):
                layout = one_replica_per_group(whole, len(cluster.groups)) if method.name == "diloco" else whole
                mixed = replace(even.plan, plan=replace(layout, dp_sync=method))
                try:
                    mixed = replace(mixed, shares=even_shares(mixed.plan, mixed.shares))
                except ConfigError:  # DiLoCo's one replica per group cannot split the batch into whole micro-batches
                    continue
                est = try_mixed(model, cluster, mixed, engine)
                if est is not None and fits_with(est, memory_margin) and est.steps_multiplier_known:
                    keep(est)
    if not any(n in bests for n in (SiteTopK.name, SiteQuantize.name)):
        return (f"per-tier compression (FusionLLM's rule gives {ratio:.3g} on the join): not tried, no layout's whole "
                "replicas fit")
    verdict = per_tier_verdict(bests, ratio, lambda e: e.plan.plan.dp_sync)
    return f"{verdict} (costed on the groups as sites; plait run keeps a mixed plan on one fabric)"
