"""Server ranks on the cores of CPU workers: the server's own work per exchange and the cores the processes share.

Where the ranks are host processes (a calibrated CPU, :func:`plait.cost.swap.device_is_host`), an asynchronous
method's server ranks (:mod:`plait.cost.async_sgd`) run on the same node's cores as the workers. One exchange
(a worker's push, the server's update, its reply) costs CPU time at both ends:

- each message half its transfer time ``latency + bytes / bandwidth`` at each end, from the node's calibrated
  gloo figures: ``plait calibrate`` times each rank sending and receiving at once on its own core
  (:mod:`plait.run.calibrate`: an all-gather of ``m`` bytes between two ranks moves ``m / 2`` each way per rank in
  the time the bus bandwidth gives ``m``), so one core sends or receives a message in half the time the
  bandwidth and latency give it; on loopback there is no wire, the latency being the per-message host overhead;
- the server's update: the operators and fp32 passes its code runs over its piece (:mod:`plait.cost.async_host`).

When the node's processes outnumber its cores (``host_cores_per_node``), the cores are processor-shared
(Kleinrock, "Queueing Systems, Vol. 2", 1976, Sec. 4.4: every runnable process gets an equal share of the
processors): over a cycle of the closed network the cores serve the demand ``D`` of all the node's processes,
so a cycle that would take ``T0`` alone takes ``max(T0, D / C)`` with ``C`` cores, every CPU activity (compute,
messages, updates) stretched by the same factor ``max(1, D / (C T0))`` (the fluid limit of processor sharing:
the cores saturated, no idle core while work waits). Where processes do not outnumber cores, nothing changes.

Assumed elsewhere: on a GPU cluster the servers run on host cores the GPU workers leave idle (a worker's host
thread only launches kernels), so nothing is shared and the prediction is :mod:`plait.cost.async_sgd`'s alone.
"""

from __future__ import annotations

import math

from plait.cost.swap import device_is_host
from plait.hardware.cluster import Cluster


def node_processes(cluster: Cluster, replicas: int, servers: int) -> tuple[int, int]:
    """(workers, servers) on the busiest node: the workers fill nodes of ``gpus_per_node`` ranks; assumed: the
    ``servers`` spread evenly over the workers' nodes, one process each."""
    nodes = math.ceil(replicas / cluster.gpus_per_node)
    return min(replicas, cluster.gpus_per_node), math.ceil(servers / nodes)


def server_cpu_s(transfer_s: float, apply_s: float) -> float:
    """CPU seconds one server spends on one exchange: receiving the push and sending the reply (each half its
    transfer time, the per-message overhead included) and the update."""
    return transfer_s + apply_s


def sharing_factor(cluster: Cluster, replicas: int, servers: int, cycle_s: float, worker_cpu_s: float,
                   transfer_s: float, apply_s: float) -> float:
    """How much longer every CPU activity of an asynchronous run takes where its processes share the node's cores
    (module docstring); 1 on GPUs, without a stated core count, or with a core per process.

    ``cycle_s``: one worker's cycle alone (its compute and one exchange with each server); ``worker_cpu_s``: the
    worker's compute in it; ``transfer_s``, ``apply_s``: one message and one update at one server. In a cycle
    each worker computes and sends and receives one message per server (half its transfer time each); each server
    serves every worker once. Two workers and one server on two cores saturate them exactly (the server works only
    while a worker waits for it): factor 1."""
    cores = cluster.host_cores_per_node
    if not device_is_host(cluster.accelerator) or not cores:
        return 1.0
    workers, on_node = node_processes(cluster, replicas, servers)
    if workers + on_node <= cores:
        return 1.0
    demand = workers * (worker_cpu_s + servers * transfer_s) + on_node * replicas * server_cpu_s(
        transfer_s, apply_s)
    return max(1.0, demand / (cores * cycle_s))
