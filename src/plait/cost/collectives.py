"""Collective time on the network tiers a group actually crosses.

Cost model: the alpha-beta model of Thakur, Rabenseifner & Gropp 2005 ("Optimization
of collective communication operations in MPICH", Sec. 2): ring all-gather and
reduce-scatter move ``(g-1)/g`` of the full buffer per rank in ``g-1`` steps; ring
all-reduce is one of each (``2(g-1)/g``, ``2(g-1)`` steps); a tree all-reduce needs
``2 log2 g`` steps (NCCL's double binary tree), and NCCL picks the faster. Small buffers go faster by NCCL's
low-latency protocol (:mod:`plait.cost.nccl_ll`), which each collective takes where it is the faster.

Bandwidth of a group spread over tiers: NCCL builds one ring per NIC/channel, so a
group with ``m`` members inside each scale-up domain drives ``m`` NICs in parallel and
its bus bandwidth across that tier is ``m x`` the per-GPU tier bandwidth, capped by the
inner tiers (NCCL "Performance" notes on busbw; Jeaugey, GTC 2020 "NCCL 2.x"). Groups
are laid out with a rank stride (tp innermost), which decides the members per domain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from plait.cost.nccl_ll import ll_s
from plait.hardware.cluster import Cluster, NetworkTier


@dataclass(frozen=True)
class GroupLink:
    """What one process group of a plan sees of the network."""

    size: int
    """Ranks in the group."""
    latency_s: float
    """Per-step latency on the outermost tier crossed."""
    tier: int
    """Index of the outermost tier crossed (0: scale-up domain)."""
    members_per_domain: int
    """Group members inside one scale-up (tier-0) domain."""
    paths: tuple[tuple[int, NetworkTier], ...] = ()
    """Per tier crossed: (group members per domain of the tier below, the tier)."""
    sites: int = 1
    """Sites the group spans when its outermost tier joins sites (``wide_area``), else 1."""
    nccl_protocols: bool = True
    """The group's collectives run on NCCL, which may take its low-latency protocol (:mod:`plait.cost.nccl_ll`)."""
    ll_cache: dict[str, tuple[float, float]] = field(default_factory=dict, repr=False, compare=False)
    """:mod:`plait.cost.nccl_ll`'s terms by collective, computed on first use (derived from the fields above)."""

    def bus_bytes_per_s(self, message_bytes: float, kind: str = "all_reduce") -> float:
        """Achievable bus bandwidth of collective ``kind`` on a ``message_bytes`` buffer (slowest tier crossed)."""
        slowest = math.inf  # a loop, not min() over a generator: fewer calls on every collective costed
        for below, tier in self.paths:  # min(slowest, bandwidth) without the builtin's call, slowest kept on ties
            bandwidth = below * tier.bandwidth_bytes_per_s(message_bytes, kind)
            if bandwidth < slowest:
                slowest = bandwidth
        return slowest

    def cross_bytes_per_s(self, message_bytes: float) -> float:
        """Per-GPU bandwidth of the outermost tier (what point-to-point and all-to-all traffic gets)."""
        if not self.paths:
            return math.inf
        return self.paths[-1][1].bandwidth_bytes_per_s(message_bytes)


def group_link(cluster: Cluster, size: int, stride: int) -> GroupLink:
    """Network view of a group of ``size`` ranks spaced ``stride`` apart (computed once per cluster and group)."""
    found = cluster.link_cache.get((size, stride))
    if found is None:
        found = cluster.link_cache[(size, stride)] = _group_link(cluster, size, stride)
    return found  # type: ignore[no-any-return]


def _group_link(cluster: Cluster, size: int, stride: int) -> GroupLink:
    if size <= 1:
        return GroupLink(1, 0.0, 0, 1)
    outer = cluster.tier_index(stride * (size - 1) + 1)

    def members_within(span: int) -> int:
        return 1 if stride >= span else min(size, span // stride)

    paths = []
    for index in range(outer + 1):
        below = members_within(cluster.tiers[index - 1].span_gpus) if index else 1
        paths.append((below, cluster.tiers[index]))
    sites = -(-size // paths[-1][0]) if cluster.tiers[outer].wide_area else 1
    return GroupLink(size, cluster.tiers[outer].latency_s, outer, members_within(cluster.tiers[0].span_gpus),
                     tuple(paths), sites, _nccl(cluster))


def _nccl(cluster: Cluster) -> bool:
    """The cluster's collectives run on NCCL: its back-end says so and its ranks are GPUs. CPU ranks (an accelerator
    without a launch queue, as ``plait calibrate`` describes a CPU) collect by gloo whatever the description's
    back-end, and gloo has no LL protocol (its all-reduces are ring, chunked ring, halving-doubling and BCube
    algorithms: facebookincubator/gloo, ``gloo/allreduce_*.h``)."""
    return cluster.collective_backend == "nccl" and cluster.accelerator.asynchronous_launch


def all_reduce_s(num_bytes: float, link: GroupLink) -> float:
    """All-reduce of a ``num_bytes`` buffer (ring bandwidth, min of ring/tree latency); across sites,
    hierarchical (:func:`_across_sites_s`)."""
    g = link.size
    if g <= 1 or num_bytes <= 0:
        return 0.0
    if link.sites > 1:
        return _across_sites_s(num_bytes, link)
    steps = min(2 * (g - 1), 2 * math.ceil(math.log2(g)))
    measured = steps * link.latency_s + 2 * (g - 1) / g * num_bytes / link.bus_bytes_per_s(num_bytes)
    low_latency = ll_s("all_reduce", num_bytes, link)  # NCCL takes its faster protocol: min(), written out (below)
    return low_latency if low_latency < measured else measured


def _across_sites_s(num_bytes: float, link: GroupLink) -> float:
    """All-reduce over ``S`` sites of ``m`` members each, hierarchically: reduce-scatter inside each site, the
    ``m`` shards all-reduced across the sites in parallel, all-gather inside each site (the 2D/hierarchical
    all-reduce of Jia et al. 2018, arXiv 1807.11205, Sec. 4.3). Only ``2 (S-1)/S`` of the buffer crosses the
    wide-area link per site and direction, against ``2 (g-1)/g`` for a flat ring over all ``g`` ranks. plait's
    runtime runs this schedule across sites (:mod:`plait.run.sites`); over gloo, between two namespaces joined at
    200 Mbit/s, 13.1 MB took 0.76 s flat and 0.63-0.66 s hierarchically with 2 ranks per site, of which 0.54 s
    crossing the link and 0.09 s each reduce-scatter inside a site on two shared cores (2026-12-03,
    ``benchmarks/low_comm.py``'s ``two_sites``)."""
    m, sites = link.paths[-1][0], link.sites
    wide = link.paths[-1][1]
    inside = 0.0
    if m > 1 and len(link.paths) > 1:  # a reduce-scatter and an all-gather, each on its own measured curve
        inside = 2 * (m - 1) * link.paths[-2][1].latency_s + sum(
            (m - 1) / m * num_bytes / min(below * tier.bandwidth_bytes_per_s(num_bytes, kind)
                                          for below, tier in link.paths[:-1])
            for kind in ("reduce_scatter", "all_gather"))
    shard = num_bytes / m
    steps = min(2 * (sites - 1), 2 * math.ceil(math.log2(sites)))
    return inside + steps * wide.latency_s + 2 * (sites - 1) / sites * shard / wide.bandwidth_bytes_per_s(shard)


def all_gather_s(full_bytes: float, link: GroupLink) -> float:
    """All-gather producing a ``full_bytes`` buffer on every rank (ring)."""
    return _ring_s(full_bytes, link, "all_gather")


def reduce_scatter_s(full_bytes: float, link: GroupLink) -> float:
    """Reduce-scatter of a ``full_bytes`` buffer (ring); the all-gather's cost unless the tier measures its own."""
    return _ring_s(full_bytes, link, "reduce_scatter")


def _ring_s(full_bytes: float, link: GroupLink, kind: str) -> float:
    g = link.size
    if g <= 1 or full_bytes <= 0:
        return 0.0
    measured = (g - 1) * link.latency_s + (g - 1) / g * full_bytes / link.bus_bytes_per_s(full_bytes, kind)
    # NCCL takes its faster protocol: min(measured, low_latency), measured on ties, without the builtin's argument
    # parsing (~800 machine instructions a call, valgrind; a cold estimate costs a dozen collectives)
    low_latency = ll_s(kind, full_bytes, link)
    return low_latency if low_latency < measured else measured


def all_to_all_s(send_bytes: float, link: GroupLink) -> float:
    """All-to-all where each rank sends ``send_bytes`` spread evenly over the group.

    Traffic to peers outside the rank's scale-up domain leaves through its own NIC
    (no aggregation), the rest stays on the scale-up links; the two run in parallel.
    """
    g = link.size
    if g <= 1 or send_bytes <= 0:
        return 0.0
    inside = link.members_per_domain
    outside_bytes = send_bytes * (g - inside) / g
    inside_bytes = send_bytes * (inside - 1) / g
    time = inside_bytes / link.bus_bytes_per_s(send_bytes)
    if outside_bytes:
        time = max(time, outside_bytes / link.cross_bytes_per_s(send_bytes))
    return link.latency_s + time


def p2p_s(num_bytes: float, link: GroupLink) -> float:
    """One point-to-point send between neighbouring ranks of the group."""
    if link.size <= 1 or num_bytes <= 0:
        return 0.0
    return link.latency_s + num_bytes / link.cross_bytes_per_s(num_bytes)
