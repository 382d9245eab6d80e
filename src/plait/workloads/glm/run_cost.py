"""The step ``plait run``'s GLM worker (:mod:`.worker`) takes, predicted on a cluster (``--cluster``; on this machine
the description ``plait calibrate`` writes: its DRAM bandwidth and the fraction of it streaming ops reach, its
one-element op's time as the kernel floor, its per-op dispatch as ``host_launch_us``, gloo's latency and bus
bandwidth between its ranks, and that a CPU runs each op inside its call).

The worker runs every method unpipelined (one micro-batch), so data-parallel and feature-partitioned steps are
:func:`.cost.glm_cost`'s at ``m = 1``: its memory-bound passes and its all-reduce, unchanged. Its host stream
issues the worker's own operators instead of the GPU baselines' fused kernels: eager PyTorch's ``mv``, the loss's
elementwise ops one by one, the update's scale, add and subtract (about 15 a step, counted by
:func:`plait.workloads.op_count.launches` on the worker's step) at :func:`plait.cost.host.issue_s` each (eager ops), joined with the device
stream as plait's core joins them (:func:`plait.cost.host.exposed_host_s`: a CPU runs each op inside its call, so every
launch adds). The worker's switch is emulated on rank 0 (:func:`.worker.
switch_sum`): its partial sums travel as point-to-point messages, not through an aggregating switch, so that
method's all-reduce is replaced by :func:`emulated_switch_s`.
"""

from __future__ import annotations

import numpy as np

from plait.cost.collectives import group_link
from plait.cost.host import exposed_host_s, issue_s
from plait.hardware.cluster import Cluster
from plait.workloads.glm.cost import Method, glm_cost
from plait.workloads.glm.model import GlmSpec


def emulated_switch_s(cluster: Cluster, ranks: int, num_bytes: float) -> float:
    """Rank 0 as the switch: the other ``P - 1`` ranks' ``num_bytes`` arrive over rank 0's link one after the other,
    then the sum leaves to each of them: two phases of one latency and ``(P - 1)`` messages at the outermost tier's
    point-to-point bandwidth (the alpha-beta model of :func:`plait.cost.collectives.p2p_s`, Thakur et al. 2005,
    Sec. 2, with rank 0's link carrying every message)."""
    if ranks <= 1 or num_bytes <= 0:
        return 0.0
    link = group_link(cluster, ranks, 1)
    return 2 * (link.latency_s + (ranks - 1) * num_bytes / link.cross_bytes_per_s(num_bytes))


def run_step_s(spec: GlmSpec, cluster: Cluster, ranks: int, method: Method, launches: int) -> float:
    """One step of ``method`` as the worker runs it on ``ranks`` ranks of ``cluster``, its host issuing
    ``launches`` operators (module docstring)."""
    if method == "switch_aggregated":
        split = glm_cost(spec, cluster, ranks, "feature_partitioned")  # the same kernels at m = 1
        device = split.device_s - split.comm_s + emulated_switch_s(cluster, ranks, spec.batch * spec.value_bytes)
    else:
        device = glm_cost(spec, cluster, ranks, method).device_s
    accelerator = cluster.accelerator
    host = launches * issue_s(accelerator, eager=True)
    return device + float(exposed_host_s(device, host, np, accelerator.asynchronous_launch))
