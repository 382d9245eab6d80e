"""A GLM's SGD step on ``P`` ranks: memory-bound passes over the batch's features and one all-reduce.

A GLM step does two multiply-adds per stored feature value (``z = X w`` forward, ``g = X^T l'(z)`` backward), so
on a GPU it is bound by the bytes it reads, not by its arithmetic: each kernel takes the bytes it streams over the
HBM bandwidth a streaming kernel reaches (the accelerator's ``memory`` efficiency), and never less than one
kernel's floor (``kernel_launch_us``). The kernels are those of the GPU baselines P4SGD's authors published
(github.com/RC4ML/GLMBaseline, ``GPUBaseline/MoedlParalism/src/communicator.cu`` and ``.../DataParalism/...``):
per step the gradient is reset, then per (micro-)batch a dot-product GEMM, the all-reduce (feature-partitioned:
the dots, before the next kernel), a "statistics" kernel (the loss slope ``l'(z)``), a gradient GEMM accumulating
into ``g``, and (data-parallel: after the gradient's all-reduce) the update. Forward and backward read the batch's
stored features (dense values, or CSR values and indices) and the weights they touch (a dense row reads ``w``
once; a sparse one gathers one weight per stored value, and the backward adds one gradient value per stored
value); the update reads ``w`` and ``g`` and writes ``w``. Three ways to split the work (P4SGD, Huang et al.,
arXiv 2305.05885; Parnell et al., arXiv 1702.07005: split by example or by feature):

- ``data_parallel``: each rank takes ``B / P`` examples with all ``D`` features and holds the whole model; the
  ranks all-reduce the ``D``-float gradient (the model all-reduce) after the backward, before the update.
- ``feature_partitioned``: each rank holds ``D / P`` features of every example and that slice of the model (P4SGD's
  model parallelism); the ranks all-reduce the batch's ``B`` partial dot products (``B`` floats) between the
  forward and the backward, on the network's ring or tree (:func:`plait.cost.collectives.all_reduce_s`).
- ``switch_aggregated``: as ``feature_partitioned``, the partial sums added by the switches of the tier the ranks
  meet on (the tier's ``aggregation``: P4SGD's in-switch, latency-centric all-reduce): each rank sends its ``B``
  floats once and receives the sum once, one switch round trip plus the payload at the smaller of the line rate
  (times the payload fraction) and the switch's slot window (SwitchML, Sapio et al., NSDI 2021, Sec. 3.4); ranks of
  one scale-up domain first reduce inside it and broadcast the sum back (NCCL's CollNet; Graham et al., COMHPC
  2016, Sec. 3), in the fewer of a ring's ``2 (m - 1)`` and a tree's ``2 log2 m`` steps of its latency (as
  :func:`plait.cost.collectives.all_reduce_s` counts them).

Both feature-partitioned methods pipeline forward, communication and backward over ``m`` micro-batches of the
batch (P4SGD's forward-communication-backward pipeline): micro-batch ``i``'s all-reduce runs while ``i + 1``'s
forward and ``i - 1``'s backward do. P4SGD's FPGA has a forward and a backward engine of its own (separate
modules in its authors' RTL, github.com/RC4ML/P4FPGA ``hw/rtl/new/sgd_dot_product_async.sv`` and
``sgd_gradient.sv``); on a GPU both passes stream from the same HBM, so one pipeline slot holds a forward and a
backward on the device beside an all-reduce on the network: a step takes ``f + c + b + (m - 1) max(f + b, c)``
(derived here: a two-resource pipeline's fill, drain and ``m - 1`` steady slots),
``f``, ``c``, ``b`` (slope and backward) being one micro-batch's times, between the reset and the update. The
baselines above take the whole batch as one micro-batch on one stream (``m = 1`` here). The data-parallel step
has one gradient, whole only after the backward: nothing overlaps.

The host issues each kernel and collective (an all-reduce is one NCCL launch, in the switches too: NVLink SHARP
and InfiniBand SHARP are NCCL's NVLS and CollNet algorithms) at the accelerator's ``host_launch_us``; as plait's
core joins its two streams (:func:`plait.cost.host.exposed_host_s`), a GPU's launch queue hides the host behind the
device unless it is slower (the step takes the larger), while a CPU runs each op inside its call, so there every
launch adds to the step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from plait.cost.collectives import all_reduce_s, group_link
from plait.cost.host import exposed_host_s
from plait.hardware.cluster import Cluster
from plait.units import GIB
from plait.workloads.glm.model import GlmSpec

Method = Literal["data_parallel", "feature_partitioned", "switch_aggregated"]
METHODS: tuple[Method, ...] = ("data_parallel", "feature_partitioned", "switch_aggregated")
"""The ways to split a GLM step over ranks (module docstring)."""


@dataclass(frozen=True, kw_only=True)
class GlmCost:
    """One method's step on ``ranks`` ranks (per rank; times in seconds)."""

    method: Method
    """How the step is split (module docstring)."""
    ranks: int
    """Ranks ``P``."""
    micro_batches: int
    """Micro-batches the step is pipelined over (1: not pipelined)."""
    forward_s: float
    """The forward passes (all micro-batches, as if alone)."""
    comm_s: float
    """The all-reduces (all micro-batches, as if alone)."""
    backward_s: float
    """The loss slopes and backward passes (all micro-batches, as if alone)."""
    update_s: float
    """The gradient's reset and the weight update."""
    host_s: float
    """The host's time to issue the step's kernels and collectives (module docstring)."""
    device_s: float
    """One step of the device and the network alone, with the pipeline's overlap."""
    step_s: float
    """One step, with the pipeline's overlap."""
    epoch_s: float
    """``ceil(N / B)`` steps."""
    read_bytes: float
    """HBM bytes one rank reads and writes per step."""
    sent_bytes: float
    """Bytes one rank sends per step (ring all-reduce: ``2 (P - 1) / P`` of the buffer; switch: the buffer once)."""
    memory_bytes: float
    """One rank's resident bytes: its share of the data set, labels, weights and gradient."""
    why_not: str = ""
    """Why the method cannot run (empty: it can)."""


def _pass_s(cluster: Cluster, num_bytes: float) -> float:
    """A memory-bound kernel (module docstring)."""
    accelerator = cluster.accelerator
    rate = accelerator.memory_bandwidth_bytes_per_s * accelerator.efficiency.memory.value
    return max(accelerator.efficiency.kernel_launch_us.value * 1e-6, num_bytes / rate)


def _kernel_bytes(spec: GlmSpec, rows: float, cols: float) -> tuple[float, float, float, float, float]:
    """HBM bytes of the kernels over ``rows`` examples and ``cols`` features, in the order the GPU baselines of
    P4SGD's authors issue them (module docstring): the gradient's reset, the forward dot products, the loss slope,
    the backward (accumulated into the gradient: read and written) and the update."""
    vb = spec.value_bytes
    features = rows * spec.row_bytes(cols)
    weights = rows * cols * spec.density * vb if spec.sparse else cols * vb  # gathered (sparse) or read once
    forward = features + weights + rows * vb  # z written
    slope = 3 * rows * vb  # z and y read, l'(z) written
    backward = features + rows * vb + 2 * weights  # l'(z) read; g read and written where the rows touch it
    return cols * vb, forward, slope, backward, 3 * cols * vb


def switch_s(cluster: Cluster, ranks: int, num_bytes: float) -> tuple[float, str]:
    """One in-switch sum of ``num_bytes`` from each of ``ranks`` ranks, and why it cannot run (module docstring)."""
    link = group_link(cluster, ranks, 1)
    tier = cluster.tiers[link.tier]
    if tier.aggregation is None:
        return math.inf, f"the ranks meet on tier {tier.name!r}, whose switches do not aggregate"
    aggregation = tier.aggregation
    rate = min(tier.line_bytes_per_s * aggregation.payload_fraction, aggregation.window_bytes_per_s)
    seconds = aggregation.round_trip_us * 1e-6 + num_bytes / rate
    inside = link.members_per_domain if link.tier > 0 else 1
    if inside > 1:
        steps = min(2 * (inside - 1), 2 * math.ceil(math.log2(inside)))
        seconds += steps * group_link(cluster, inside, 1).latency_s
    return seconds, ""


def glm_cost(spec: GlmSpec, cluster: Cluster, ranks: int, method: Method, micro_batches: int = 1) -> GlmCost:
    """The step of ``method`` on ``ranks`` ranks (module docstring)."""
    b, d, vb = spec.batch, spec.features, spec.value_bytes
    split = method != "data_parallel"
    rows, cols = (b, d / ranks) if split else (b / ranks, d)
    m = micro_batches if split else 1
    reset, fwd, slope, bwd, upd = _kernel_bytes(spec, rows / m, cols)
    f = _pass_s(cluster, fwd)
    b_s = _pass_s(cluster, slope) + _pass_s(cluster, bwd)
    update = _pass_s(cluster, reset) + _pass_s(cluster, upd)
    ring = 2 * (ranks - 1) / ranks
    why = ""
    if method == "data_parallel":
        c = all_reduce_s(d * vb, group_link(cluster, ranks, 1))
        sent, step = ring * d * vb, f + b_s + c + update
    elif method == "feature_partitioned":
        c = all_reduce_s(b / m * vb, group_link(cluster, ranks, 1))
        sent = ring * b * vb
    else:
        c, why = switch_s(cluster, ranks, b / m * vb) if ranks > 1 else (0.0, "")
        sent = b * vb if ranks > 1 else 0.0
    if split:
        step = f + c + b_s + (m - 1) * max(f + b_s, c) + update
    launches = 2 + m * (3 + (ranks > 1 and split)) + (ranks > 1 and not split)
    host = launches * cluster.accelerator.efficiency.host_launch_us.value * 1e-6
    device = step
    step += float(exposed_host_s(device, host, np, cluster.accelerator.asynchronous_launch))
    resident = _resident_bytes(spec, ranks, split)
    capacity = cluster.accelerator.memory_bytes - cluster.accelerator.efficiency.runtime_reserved_gib.value * GIB
    if not why and resident > capacity:
        why = f"one rank's {resident / GIB:.1f} GiB of data and model exceed its {capacity / GIB:.1f} GiB"
    if b % ranks and not split:
        why = why or f"batch {b} does not split evenly over {ranks} ranks"
    if d < ranks and split:
        why = why or f"{d} features leave ranks without a feature"
    return GlmCost(method=method, ranks=ranks, micro_batches=m, forward_s=m * f, comm_s=m * c, backward_s=m * b_s,
                   update_s=update, host_s=host, device_s=device, step_s=step,
                   epoch_s=math.ceil(spec.samples / b) * step,
                   read_bytes=m * (fwd + slope + bwd) + reset + upd, sent_bytes=sent, memory_bytes=resident,
                   why_not=why)


def _resident_bytes(spec: GlmSpec, ranks: int, split: bool) -> float:
    """One rank's share of the data set (and its labels) and its weights and gradient."""
    n, d, vb = spec.samples, spec.features, spec.value_bytes
    if split:
        return n * spec.row_bytes(d / ranks) + n * vb + 2 * d / ranks * vb
    return n / ranks * (spec.row_bytes(d) + vb) + 2 * d * vb
