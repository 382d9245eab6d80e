"""Bytes and seconds of ``gossip`` (decentralized SGD, issue 16; topologies in :mod:`plait.plan.gossip`).

Each step a replica sends its parameters (its own shards, fp32: ``4 P`` bytes) to every replica that receives
from it and averages the copies it receives (D-PSGD, Lian et al. 2017, Algorithm 1: one exchange of the model
with each neighbour per iteration). Sends and receives run at once, full duplex; a copy to a replica in the same
scale-up domain crosses NVLink, any other the rank's NIC, both in parallel; the step waits for the busiest rank
(the exchange follows the optimizer step, nothing overlaps it: plait's runtime, :mod:`plait.run.gossip`). Mixing
reads the own and ``m`` received copies and writes one, at the sustained memory bandwidth.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

from plait.cost.compute import memory_bytes_per_s
from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns
from plait.plan.gossip import period, sources, targets
from plait.plan.sync import Sync

PARAM_BYTES = 4


def topology_of(sync: Sync) -> tuple[str, int]:
    """(topology, peers) of a ``gossip`` spec."""
    return sync.choice("topology"), int(sync["peers"])


def sent_bytes(sync: Sync, params: int, rank: int, replicas: int, step: int | None = None) -> float:
    """Bytes group rank ``rank`` sends at ``step`` (``None``: the mean over a period), ``params`` elements each."""
    topology, peers = topology_of(sync)
    if step is not None:
        return float(len(targets(topology, replicas, peers, step, rank)) * PARAM_BYTES * params)
    steps = period(topology, replicas, peers)
    return sum(len(targets(topology, replicas, peers, t, rank)) for t in range(steps)) * PARAM_BYTES * params / steps


@cache
def _busiest(topology: str, peers: int, replicas: int, stride: int, domain: int) -> tuple[float, float, int]:
    """(copies sent inside a scale-up domain, copies sent outside it, copies received) by the busiest replica
    per step, over a period: the rank with the most outside, then inside."""
    steps = period(topology, replicas, peers)
    worst, received = (0.0, 0.0), 0
    for i in range(replicas):
        inside = outside = 0
        for t in range(steps):
            for j in targets(topology, replicas, peers, t, i):
                same = (i * stride) // domain == (j * stride) // domain
                inside, outside = inside + same, outside + (not same)
            received = max(received, len(sources(topology, replicas, peers, t, i)))
        worst = max(worst, (outside / steps, inside / steps))
    return worst[1], worst[0], received


def gossip_costs(cluster: Cluster, sync: Sync, cols: PlanColumns, replicas: Any, stride: Any,
                 params: Any) -> tuple[Any, Any, Any]:
    """(0, exposed seconds, extra bytes of memory) per row of ``cols``: the exchange and mix after each step among
    ``replicas`` ranks ``stride`` apart, each holding ``params`` elements (per row)."""
    topology, peers = topology_of(sync)
    tier0 = cluster.tiers[0]
    memory_bw = memory_bytes_per_s(cluster.accelerator)

    def one(replicas: int, stride: int, elements: float) -> tuple[float, float]:
        if replicas <= 1:
            return 0.0, 0.0
        inside, outside, received = _busiest(topology, peers, replicas, stride, tier0.span_gpus)
        copy = PARAM_BYTES * elements
        outer = cluster.tiers[cluster.tier_index(stride * (replicas - 1) + 1)]
        time = max(inside * copy / tier0.bandwidth_bytes_per_s(copy),
                   outside * copy / outer.bandwidth_bytes_per_s(copy) if outside else 0.0)
        latency = outer.latency_s if outside else tier0.latency_s
        mix = (received + 2) * copy / memory_bw
        return latency + time + mix, received * copy

    if cols.xp.scalar:
        time, memory = one(int(replicas), int(stride), float(params))
        return 0.0, time, memory
    keys = np.stack(np.broadcast_arrays(replicas, stride, np.asarray(params, dtype=float)), axis=1)
    distinct, inverse = np.unique(keys, axis=0, return_inverse=True)
    each = np.array([one(int(n), int(t), float(e)) for n, t, e in distinct])
    inverse = inverse.reshape(-1)
    return cols.zeros(), each[inverse, 0], each[inverse, 1]
