"""Bytes and seconds of ``gossip`` (decentralized SGD; topologies in :mod:`plait.plan.gossip`).

Each step a replica sends its parameters (its own shards, fp32: ``4 P`` bytes) to every replica that receives
from it and averages the copies it receives (D-PSGD, Lian et al. 2017, Algorithm 1: one exchange of the model
with each neighbour per iteration). Sends and receives run at once, full duplex; a copy crosses the innermost tier
whose blocks hold both replicas, through the rank's own share of that tier (NVLink, its NIC) or, on a wide-area
tier, through its site's link, which the site's crossing copies share; tiers run in parallel and the step waits
for the busiest rank or site
(the exchange follows the optimizer step, nothing overlaps it: plait's runtime, :mod:`plait.run.gossip`). Mixing
streams the parameters :data:`MIX_PASSES` times and three more per received copy, at the sustained memory
bandwidth.

With ``delay=1`` (delay-by-one, Zhang, Cui et al., arXiv 2002.01119) the exchange a step starts runs beside the
next step's forward and backward, so only what outlasts them is exposed: ``max(0, comm - compute)`` per step, as
for Pipe-SGD's all-reduce behind the next step (Li et al. NeurIPS 2018, Sec. 3: the step takes the larger of the
two); the mixing stays on the critical path, and a replica holds one more copy (the parameters it sent, which the
mix needs a step later).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

from plait.cost.compute import memory_bytes_per_s
from plait.cost.distinct import per_distinct
from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns
from plait.plan.gossip import period, sources, targets
from plait.sync import Gossip

PARAM_BYTES = 4
MIX_PASSES = 6
"""Streaming passes over the parameters in one gossip average of :class:`plait.run.gossip.Gossip` besides three per
received copy (``mixed += w x_j``: read two, write one): the flat copy (read, write), the own weighted copy (read,
write) and the copy back into the parameters (read, write)."""


def topology_of(sync: Gossip) -> tuple[str, int]:
    """(topology, peers) of a ``gossip`` spec."""
    return sync.topology, sync.peers


def sent_bytes(sync: Gossip, params: int, rank: int, replicas: int, step: int | None = None) -> float:
    """Bytes group rank ``rank`` sends at ``step`` (``None``: the mean over a period), ``params`` elements each."""
    topology, peers = topology_of(sync)
    if step is not None:
        return float(len(targets(topology, replicas, peers, step, rank)) * PARAM_BYTES * params)
    steps = period(topology, replicas, peers)
    return sum(len(targets(topology, replicas, peers, t, rank)) for t in range(steps)) * PARAM_BYTES * params / steps


def _tier_of(a: int, b: int, spans: tuple[int, ...]) -> int:
    """Innermost tier whose aligned blocks hold global ranks ``a`` and ``b`` together."""
    return next(i for i, span in enumerate(spans) if a // span == b // span)


@cache
def _loads(topology: str, peers: int, replicas: int, stride: int, spans: tuple[int, ...],
           wide: tuple[bool, ...]) -> tuple[tuple[float, ...], int]:
    """(copies per step on each tier, copies received), the busiest over a period: on a tier with a NIC per GPU,
    the most one replica sends across it; on a wide-area tier, the most one site sends across it (its link is
    shared by the site's ranks: ``NetworkTier.wide_area``)."""
    steps = period(topology, replicas, peers)
    per_rank = np.zeros((replicas, len(spans)))
    per_site: dict[tuple[int, int], float] = {}
    received = 0
    for t in range(steps):
        for i in range(replicas):
            received = max(received, len(sources(topology, replicas, peers, t, i)))
            for j in targets(topology, replicas, peers, t, i):
                tier = _tier_of(i * stride, j * stride, spans)
                if wide[tier]:
                    key = (tier, i * stride // spans[tier - 1])
                    per_site[key] = per_site.get(key, 0.0) + 1.0 / steps
                else:
                    per_rank[i, tier] += 1.0 / steps
    loads = per_rank.max(axis=0)
    for (tier, _), copies in per_site.items():
        loads[tier] = max(loads[tier], copies)
    return tuple(float(x) for x in loads), received


def gossip_costs(cluster: Cluster, sync: Gossip, cols: PlanColumns, replicas: Any, stride: Any,
                 params: Any, busy: Any = 0.0) -> tuple[Any, Any, Any]:
    """(0, exposed seconds, extra bytes of memory) per row of ``cols``: the exchange and mix after each step among
    ``replicas`` ranks ``stride`` apart, each holding ``params`` elements (per row); with ``delay=1`` the exchange
    hides behind ``busy``, the step's compute (module docstring)."""
    topology, peers = topology_of(sync)
    memory_bw = memory_bytes_per_s(cluster.accelerator)

    spans = tuple(t.span_gpus for t in cluster.tiers)
    wide = tuple(t.wide_area for t in cluster.tiers)
    site = cluster.site_gpus or 1

    def one(replicas: int, stride: int, elements: float) -> tuple[float, float]:
        """(exchange seconds, mix seconds) of one row."""
        if replicas <= 1:
            return 0.0, 0.0
        loads, received = _loads(topology, peers, replicas, stride, spans, wide)
        copy = PARAM_BYTES * elements
        times = [copies * copy / (tier.bandwidth_bytes_per_s(copy) * (site if tier.wide_area else 1))
                 + (tier.latency_s if copies else 0.0) for copies, tier in zip(loads, cluster.tiers)]
        return max(times), (MIX_PASSES + 3 * received) * copy / memory_bw

    def held(replicas: int, stride: int, elements: float) -> tuple[float, float]:
        """(bytes of the received copies, and of the sent one kept a step under ``delay=1``) of one row."""
        if replicas <= 1:
            return 0.0, 0.0
        _, received = _loads(topology, peers, replicas, stride, spans, wide)
        return received * PARAM_BYTES * elements, sync.delay * PARAM_BYTES * elements

    xp = cols.xp
    exchange, mix = per_distinct(cols, lambda n, t, e: one(int(n), int(t), float(e)), replicas, stride, params)
    received, kept = per_distinct(cols, lambda n, t, e: held(int(n), int(t), float(e)), replicas, stride, params)
    exposed = xp.maximum(exchange - busy, 0.0) if sync.delay else exchange
    return cols.zeros(), exposed + mix, received + kept
