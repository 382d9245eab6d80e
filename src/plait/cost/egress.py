"""Bytes that leave a site per step, on clusters whose outer tier joins sites.

Ranks are laid out in aligned blocks (:mod:`plait.plan.plan`), so a group spans ``S`` whole sites. An
all-reduce across sites is hierarchical (:func:`plait.cost.collectives.all_reduce_s`): each site's members
reduce-scatter among themselves, all-reduce their shards with their peers in the other sites and all-gather, so
``2 (S-1)/S`` of the buffer leaves each site, ``2 (S-1)`` buffers in all (Jia et al. 2018, arXiv 1807.11205).
An all-gather is a ring (Patarasuk & Yuan, JPDC 69(2), 2009): it crosses ``S`` site boundaries, each edge
carrying what one rank sends, ``(g-1)/g`` of the full buffer. A pipeline's chain of stages crosses ``S - 1``
boundaries, each carrying every micro-batch's activation forward and its gradient back.

Counted: the data-parallel gradient traffic (all-reduce, ZeRO's reduce-scatter and all-gather, FSDP's per-layer
gathers, HSDP's replica all-reduce, or the ``dp_sync`` method's own collectives) and pipeline transfers.
Tensor-, context- and expert-parallel groups are taken to stay inside a site (they are the innermost groups;
the planner never needs to stretch them over a wide-area link); FSDP's recompute re-gathers are left out.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from plait.cost.batch import stage_sync
from plait.cost.memory import param_bytes
from plait.cost.params import stage_layer_counts
from plait.cost.prepared import prepare
from plait.engine.facts import EngineFacts
from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns
from plait.plan.ops import SCALAR
from plait.plan.plan import Plan
from plait.sync import SyncMethod
from plait.sync.base import GRAD_BYTES
from plait.workload.model import ModelSpec
from plait.workload.tensors import Shape, rank_shapes

if TYPE_CHECKING:
    from plait.sync import Gossip, ParamServer
    from plait.sync.asynchronous import Asynchronous

# Each point-to-point method's own module (plait.cost.servers, async_sgd with its event simulation, plait.plan.gossip
# and factors) is imported in the :class:`_Crossing` hook that asks it: a plan that all-reduces never loads them.


def sites_spanned(cluster: Cluster, size: int, stride: int) -> int:
    """Sites the members of a group of ``size`` ranks ``stride`` apart lie in (1: one site, or no sites)."""
    site = cluster.site_gpus
    if site is None or size <= 1 or stride * (size - 1) < site:
        return 1
    per_site = max(1, site // stride)
    return math.ceil(size / per_site)


def _reduced(cluster: Cluster, size: int, stride: int, buffer: float, world: int) -> float:
    """Bytes leaving sites when every group of this shape all-reduces a ``buffer``-byte buffer."""
    sites = sites_spanned(cluster, size, stride)
    return 0.0 if sites == 1 else (world / size) * 2 * (sites - 1) * buffer


def _ring(cluster: Cluster, size: int, stride: int, sent_per_rank: float, world: int) -> float:
    """Bytes leaving sites when every group of this shape sends ``sent_per_rank`` round its ring."""
    sites = sites_spanned(cluster, size, stride)
    return 0.0 if sites == 1 else (world / size) * sites * sent_per_rank


def egress_bytes_per_step(model: ModelSpec, cluster: Cluster, plan: Plan, framework: EngineFacts) -> float:
    """Bytes that cross site boundaries in one step of ``plan`` as an engine with cost facts ``framework`` runs it
    (a valid plan, ``seq_len`` filled in; 0 on a one-site cluster)."""
    site = cluster.site_gpus
    if site is None or plan.num_gpus <= site:
        return 0.0
    prepared = prepare(model, cluster, PlanColumns.one(plan), framework)
    world, tp, cp, dp = plan.num_gpus, plan.tp, plan.cp, plan.dp
    m = plan.global_batch // (plan.micro_batch * dp)
    out = 0.0
    if plan.pp > 1:
        boundaries = sites_spanned(cluster, plan.pp, tp * cp * dp) - 1
        p2p = float(prepared.inner.p2p_bytes)
        out += boundaries * tp * cp * dp * 2 * m * plan.vpp * p2p
    replicas = dp * cp
    params = stage_sync(model, cluster, prepared, 0).params
    sync = plan.dp_sync
    if not sync.is_allreduce:  # cp = ep = 1 (plait.plan.rules)
        if sync.point_to_point:  # count each pair's bytes
            return out + _point_to_point(model, cluster, plan, sync)
        if sync.infrequent:  # each rank averages what it holds (stage 0's, for every stage)
            per_rank = float(params["dense"] + params["expert"]) * GRAD_BYTES / sync.every
            if plan.sharding != "none":  # HSDP replicas average their shards
                return out + _reduced(cluster, plan.dp_replicate, tp * plan.dp_shard, per_rank / plan.dp_shard, world)
            return out + _reduced(cluster, replicas, tp, per_rank, world)
        from plait.cost.sync import payload_bytes  # the methods' costs: loaded for the rows that use one

        layers = [int(stage_layer_counts(model, plan.pp, s, SCALAR)[0]) for s in range(plan.pp)]
        sent = sum(payload_bytes(sync, rank_shapes(model, tp, 0, n, s == 0, s == plan.pp - 1))
                   for s, n in enumerate(layers)) / plan.pp  # each stage's ranks send their own tensors
        if sync.site_aware:  # each of m positions all-gathers its own pieces round a ring of S sites
            sites = sites_spanned(cluster, replicas, tp)
            members = replicas // sites
            across = sum(sync.site_payload_bytes(sum(math.prod(sh) for _, sh in rank_shapes(
                model, tp, 0, n, s == 0, s == plan.pp - 1)), members, sites)[1] for s, n in enumerate(layers)) / plan.pp
            return out + (world / replicas) * members * sites * (sites - 1) * across
        if sync.collective == "all_gather":  # all-gathered: (g-1)/g of g ranks' pieces
            return out + _ring(cluster, replicas, tp, (replicas - 1) * sent, world)
        return out + _reduced(cluster, replicas, tp, sent, world)
    dense, expert = float(params["dense"]), float(params["expert"])
    grad = float(prepared.inner.grad_bytes)
    ring = lambda g: (g - 1) / g
    if plan.sharding == "none":
        out += _reduced(cluster, replicas, tp, grad * dense, world)
        return out + _reduced(cluster, max(1, replicas // plan.ep), tp * plan.ep, grad * expert, world)
    group = plan.dp_shard * cp
    sharded = dense / group + expert / max(1, group // plan.ep)
    out += _reduced(cluster, plan.dp_replicate, tp * group, grad * sharded, world)
    total = dense + expert
    weight = float(param_bytes(PlanColumns.one(plan)))  # bytes per gathered weight: 2, or 4 under fp32/tf32
    if plan.sharding == "zero3":  # per micro-batch: gather for forward and backward, reduce-scatter the gradient
        return out + _ring(cluster, group, tp, m * ring(group) * (2 * weight + grad) * total, world)
    return out + _ring(cluster, group, tp, ring(group) * (grad + weight) * total, world)


def _point_to_point(model: ModelSpec, cluster: Cluster, plan: Plan, sync: SyncMethod) -> float:
    """Bytes leaving sites per step under the point-to-point methods, summed over every replica group
    (one per TP rank and stage; replicas ``tp`` ranks apart) from who sends what to whom: gossip's copies to the
    replicas of another site (:mod:`plait.cost.gossip`), a parameter server's pushes and replies between sites
    (:mod:`plait.cost.servers`; servers on the group's first ranks) and, with ``hybrid``, each replica's
    sufficient factors to every replica of another site, an asynchronous worker's exchange with its
    server ranks, which are taken to sit in the first site. An aggregating switch sits inside one site (the
    plan rules refuse one across a wide-area tier)."""
    site, n, tp = cluster.site_gpus or plan.num_gpus, plan.dp, plan.tp
    layers = [int(stage_layer_counts(model, plan.pp, s, SCALAR)[0]) for s in range(plan.pp)]
    total = 0.0
    for stage, count in enumerate(layers):
        named = rank_shapes(model, tp, 0, count, stage == 0, stage == plan.pp - 1)
        first = stage * tp * n  # the stage's first rank (pp outermost)
        total += sync.crossing_bytes(_Crossing(plan, named, [(first + r * tp) // site for r in range(n)]))
    return total


@dataclass(frozen=True)
class _Crossing:
    """One stage's replica groups (one per TP rank), as a method's site-crossing bytes ask about them
    (:class:`plait.sync.hooks.Crossing`): each replica's parameters ``named``, and the site each replica is in."""

    plan: Plan
    named: list[tuple[str, Shape]]
    where: list[int]

    @property
    def elements(self) -> int:
        return sum(math.prod(s) for _, s in self.named)

    def gossip_bytes(self, method: Gossip) -> float:
        from plait.plan.gossip import period as gossip_period
        from plait.plan.gossip import targets as gossip_targets

        n, where = self.plan.dp, self.where
        topology, peers = method.topology, method.peers
        steps = gossip_period(topology, n, peers)
        crossing = sum(where[i] != where[j] for t in range(steps) for i in range(n)
                       for j in gossip_targets(topology, n, peers, t, i)) / steps
        return crossing * GRAD_BYTES * self.elements * self.plan.tp

    def server_bytes(self, method: ParamServer) -> float:
        from plait.cost.servers import factored_tensors, server_loads, server_sent_bytes
        from plait.plan.factors import factor_elements

        n, tp, where, named = self.plan.dp, self.plan.tp, self.where, self.named
        if method.on_cpus:  # server ranks taken to sit in the first site
            return tp * 2 * sum(w != 0 for w in where) * server_sent_bytes(method, named, 0, n)
        tokens = self.plan.global_batch * self.plan.seq_len // n
        flags, in_site = factored_tensors(method, named, tokens, n), Counter(where)
        loads = server_loads(method, [s for (_, s), f in zip(named, flags) if not f], n)
        # a server's piece to and from each replica of another site
        total = tp * GRAD_BYTES * sum(2 * load * (n - in_site[where[j]]) for j, load in enumerate(loads))
        factors = factor_elements(named, flags, tokens)  # every replica's factors to every other site's
        return total + tp * GRAD_BYTES * factors * sum(n - in_site[w] for w in where)

    def worker_bytes(self, method: Asynchronous) -> float:
        from plait.cost.async_sgd import worker_bytes

        crossing = sum(w != 0 for w in self.where)  # server ranks taken to sit in the first site
        return self.plan.tp * 2 * crossing * worker_bytes(method, self.elements)
