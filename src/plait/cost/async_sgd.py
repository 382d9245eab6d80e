"""Step time of asynchronous methods through server ranks: ``async_ps`` and ``easgd``.

A "step" is what a synchronous step trains on: one iteration of every one of the ``N`` workers (the global batch).
Workers and servers form a closed cycle: a worker computes (``busy`` seconds: the plan's step without data-parallel
communication), pushes ``4 (P/S + 2)`` bytes (its piece of the gradient or, for EASGD, the parameters, and the
two header values of :mod:`plait.run.async_train`) to each of the ``S`` servers, a server applies it and replies
with as many bytes. With equal workers, the server's link and adder serve one message at a time, so the rate of
server updates is the smaller of the two asymptotic bounds of a closed network, ``N / (busy + push + apply +
pull)`` and ``1 / max(push, apply, pull)`` (Lazowska et al., "Quantitative System Performance", 1984, Sec. 5.2:
``X(N) <= min(N / (D + Z), 1 / D_max)``; deterministic times reach it: checked against
:func:`plait.events.async_sgd.simulate_async` in tests/test_async_sgd.py). EASGD exchanges once every ``H``
iterations, its cycle ``H busy + push + apply + pull``. A staleness bound of 0 makes every worker wait for the
slowest each iteration: simulated.

Servers are processes on the cluster's nodes (assumed: each gets one GPU's share of the NIC of the tier the
workers meet on, and of the node's host memory bandwidth, where it steps AdamW over its piece: read the gradient,
parameters and two moments, write three, 4 bytes each). Where the workers are CPU ranks, the servers share their
node's cores: :mod:`plait.cost.host_share` stretches every CPU activity by the processor-sharing factor, and the
host work plait's runtime does beyond the synchronous step is counted from its code (:mod:`plait.cost.async_host`):
a worker's own per exchange (flattening, messages, copying the reply back, EASGD's eager optimizer) joins its
cycle, and a server's update is its code's operators and passes instead of the fused ideal.
"""

from __future__ import annotations

from typing import Any

from plait.cost.async_host import server_apply_s, worker_own_s
from plait.cost.collectives import group_link
from plait.cost.distinct import per_distinct
from plait.cost.host_share import sharing_factor
from plait.cost.servers import GRAD_BYTES, HEADER_ELEMENTS
from plait.events.async_sgd import simulate_async
from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns
from plait.sync.asynchronous import Asynchronous


def worker_bytes(sync: Asynchronous, elements: int, step: int | None = None) -> float:
    """Bytes a worker pushes at ``step`` (``None``: the mean per step): every piece with its header, after every
    ``sync.every``-th step (``async_ps``: each step, ``every`` 1; ``easgd``: its ``H``)."""
    servers = sync.server_ranks
    message = float(GRAD_BYTES * (elements + HEADER_ELEMENTS * servers))
    if step is None:
        return message / sync.every
    return message if (step + 1) % sync.every == 0 else 0.0


def message_s(cluster: Cluster, sync: Asynchronous, replicas: int, stride: int, elements: float) -> tuple[float, float]:
    """(one push or pull, one apply) seconds at one server, for a worker holding ``elements`` parameters; on a host
    device the apply is the runtime's counted work (:func:`plait.cost.async_host.server_apply_s`)."""
    servers = sync.server_ranks
    tier = cluster.tiers[group_link(cluster, replicas, stride).tier]
    message = GRAD_BYTES * (elements / servers + HEADER_ELEMENTS)
    transfer = tier.latency_s + message / tier.bandwidth_bytes_per_s(message, "all_gather")
    counted = server_apply_s(cluster, sync, elements / servers)
    ideal = sync.server_passes * GRAD_BYTES * elements / servers / cluster.host_memory_bytes_per_s_per_gpu
    return transfer, ideal if counted is None else counted


def step_s(sync: Asynchronous, replicas: int, busy: float, transfer: float, apply: float, own: float = 0.0) -> float:
    """Seconds per step (``replicas`` worker iterations) of ``sync`` (module docstring); ``own``: a worker's own
    host work per exchange beyond ``busy`` per iteration (:func:`plait.cost.async_host.worker_own_s`)."""
    every = sync.every  # EASGD's period; 1 for the others
    if sync.lockstep:
        run = simulate_async([busy + own] * replicas, transfer, transfer, apply, 0, 4 * replicas)
        return replicas / run.updates_per_s
    cycle = every * busy + own + 2 * transfer + apply
    rate = min(replicas / cycle, 1.0 / max(transfer, apply))  # exchanges per second
    return replicas / (rate * every)


def async_costs(cluster: Cluster, sync: Asynchronous, cols: PlanColumns, elements: Any,
                busy: Any, tensors: int = 0) -> tuple[Any, Any, Any]:
    """(0, seconds added to each step, extra bytes of memory per GPU) per row: the flat send and receive buffers
    of a worker's parameters, held in ``tensors`` tensors."""
    def one(replicas: int, stride: int, held: float, compute: float) -> tuple[float, float]:
        if replicas <= 1:
            return 0.0, 0.0
        transfer, apply = message_s(cluster, sync, replicas, stride, held)
        own = worker_own_s(cluster, sync, held, tensors)
        alone = step_s(sync, replicas, compute, transfer, apply, own)
        worker = sync.every * compute + own
        cycle = worker + 2 * transfer + apply
        shared = sharing_factor(cluster, replicas, sync.server_ranks, cycle, worker, transfer, apply)
        return alone * shared - compute, 2.0 * GRAD_BYTES * held

    return (cols.zeros(), *per_distinct(cols, lambda n, t, e, b: one(int(n), int(t), float(e), float(b)), cols.dp,
                                        cols["tp"], elements, busy))
