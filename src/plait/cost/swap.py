"""Activation swapping: the activations a layer saves for its backward go to host memory during the forward and
come back, one layer ahead, for the backward.

Large Model Support (Le et al. 2018, "TFLMS: Large Model Support in TensorFlow by Graph Rewriting", arXiv
1811.12174, Sec. 3) swaps tensors out to host memory after their last forward use and back in before their
backward use, so that only the tensors needed now stay on the device. plait's runtime does it with PyTorch's
saved-tensor hooks (``torch.autograd.graph.saved_tensors_hooks``, as ``torch.autograd.graph.save_on_cpu``);
Megatron-Core with ``cpu_offloading`` (Transformer Engine's ``get_cpu_offload_context``, layer by layer).

Memory: the device keeps the saved activations of the layer in flight and of the one prefetched (two layers of
the largest kind), whatever the micro-batches in flight; the rest lives in host memory.

Time: each micro-batch's saved activations cross the host link twice, device-to-host in the forward and
host-to-device in the backward (the two directions of a full-duplex PCIe link). The copies run on their own
stream with one layer of prefetch, so layer ``i``'s copy overlaps layer ``i + 1``'s compute (forward) and layer
``i - 1``'s (backward): per layer the exposed part is ``max(0, transfer - compute)`` (LMS Sec. 3.2's overlap of
swaps with computation, with a one-layer lookahead). Copy engines take no SMs, so unlike a collective
(:mod:`plait.cost.overlap`) the hidden part costs the compute nothing (assumed: a copy at the host link's rate
moves under 2% of HBM bandwidth).

Host link: the accelerator's ``pcie_bandwidth_gb_per_s`` per direction, the figure ZeRO offload's transfers use
(``plait.cost.fsdp_layer.fsdp_layer_s``, :func:`plait.cost.dataparallel.optimizer_step_s`), or the GPU's share of host
DRAM bandwidth (``host_memory_bandwidth_gb_per_s_per_gpu``) where that is lower: every GPU of a node swaps at once.
The swapped bytes stay in the GPU's share of host memory (``host_memory_gib_per_gpu``): a plan whose swapped
activations exceed it does not fit (:attr:`plait.cost.estimate.MemoryBreakdown.fits`).

Contention with collectives (assumed, after ChunkFlow, arXiv 2605.11335, whose host prefetches and collectives
share PCIe, and the DGX H100 User Guide, Table 6: one ConnectX-7 per GPU, GPU and NIC behind one PCIe switch,
``nvidia-smi topo`` "PIX"): the bytes a GPU's NIC moves by GPUDirect RDMA cross the GPU's own PCIe link too, so
while a layer's collectives leave the node they take ``nic / pcie`` of the link's time. Counted: the layer's
FSDP gathers and reduce-scatters and its context-parallel exchange, when their group spans more than one node
(ranks are laid out tp, cp, dp: plait.plan.plan). Left out: the collectives' own slowdown by the copies, the
once-per-step gradient reduction, pipeline hops.

On a CPU device (``asynchronous_launch`` false: the device is the host) the hooks move nothing: swapping changes
neither memory nor time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from plait.cost.inner_values import Inner
from plait.hardware.accelerator import Accelerator
from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns
from plait.units import GB


@dataclass(frozen=True)
class SwapTimes:
    """Seconds the host link is busy per layer of one kind and per row while its saved activations move."""

    out_s: Any
    """Forward: the layer's saved activations device-to-host, plus the NIC traffic sharing the link."""
    in_s: Any
    """Backward: the same bytes host-to-device, plus the NIC traffic sharing the link."""


def device_is_host(acc: Accelerator) -> bool:
    """Whether ``acc`` is the host CPU itself (it runs ops as it issues them, ``asynchronous_launch`` false: a
    calibrated CPU, :mod:`plait.run.calibrate`), where swapped activations stay where they were."""
    return not acc.asynchronous_launch


def nic_bytes_per_s(cluster: Cluster) -> float:
    """Line rate per GPU of the innermost tier that leaves a node (0 on a one-node cluster)."""
    beyond = [t for t in cluster.tiers if t.span_gpus > cluster.gpus_per_node]
    return beyond[0].bandwidth_gb_per_s_per_gpu * GB if beyond else 0.0


def swap_layer_s(cluster: Cluster, cols: PlanColumns, inner: Inner,
                 fsdp: tuple[Any, Any], dense_group: Any) -> tuple[SwapTimes, SwapTimes]:
    """(dense, MoE) host-link seconds per layer of the rows that swap (0 elsewhere, and on a CPU device); ``fsdp``:
    the kinds' :class:`plait.cost.stage.ShardTimes`, ``dense_group``: the ZeRO/FSDP group
    (:func:`plait.cost.memory.shard_groups`)."""
    xp, acc = cols.xp, cluster.accelerator
    on = cols["swap_activations"] & (not device_is_host(acc))
    link = min(acc.pcie_bandwidth_gb_per_s * GB, cluster.host_memory_bytes_per_s_per_gpu)  # lands in host DRAM
    share = min(1.0, nic_bytes_per_s(cluster) / link)  # link seconds per second the NIC streams
    node = cluster.gpus_per_node
    fsdp_leaves = cols["tp"] * dense_group > node  # the shard group (stride tp) spans nodes
    cp_leaves = cols["tp"] * cols["cp"] > node
    out = []
    for kind, shard in zip(inner.kinds, fsdp):
        copy = kind.activation_bytes / link
        nic_fwd = xp.where(fsdp_leaves, shard.gather_s, 0.0) + xp.where(cp_leaves, kind.cp_fwd_s, 0.0)
        nic_bwd = xp.where(fsdp_leaves, shard.gather_s + shard.reduce_s, 0.0) + xp.where(cp_leaves, kind.cp_bwd_s, 0.0)
        out.append(SwapTimes(out_s=xp.where(on, copy + share * nic_fwd, 0.0),
                             in_s=xp.where(on, copy + share * nic_bwd, 0.0)))
    return out[0], out[1]


def exposed_swap_s(swap: SwapTimes, forward_work_s: Any, backward_work_s: Any, xp: Any) -> tuple[Any, Any]:
    """(forward, backward) exposed seconds of one layer's swap behind its neighbour's work (module docstring)."""
    return xp.maximum(0.0, swap.out_s - forward_work_s), xp.maximum(0.0, swap.in_s - backward_work_s)


def swapped_layers(cols: PlanColumns, n_dense: Any, n_moe: Any) -> tuple[Any, Any]:
    """(dense, MoE) layers of a stage whose saved activations swap: the first ``swap_layers`` in forward order
    (Transformer Engine's CPU offload takes layer groups below ``num_offload_group``,
    ``transformer_engine/pytorch/cpu_offload.py`` ``tensor_push``), every layer where it is -1, none where the row
    does not swap. Of a stage of dense and MoE layers, the dense ones are counted first, as
    :func:`plait.cost.stage.recomputed_layers` counts the layers it recomputes."""
    xp, layers = cols.xp, n_dense + n_moe
    k = xp.where(cols["swap_layers"] < 0, layers, xp.minimum(cols["swap_layers"], layers))
    k = xp.where(cols["swap_activations"], k, 0)
    dense = xp.minimum(k, n_dense)
    return dense, k - dense


def swapped_bytes_per_micro_batch(cols: PlanColumns, inner: Inner, n_dense: Any, n_moe: Any) -> Any:
    """Bytes of saved activations one micro-batch sends to the host (and brings back) on a stage of ``n_dense``
    and ``n_moe`` layers: every swapped layer's (:func:`swapped_layers`; the runtime's hooks pack each saved tensor
    once, layers kept on the device included; the memory model keeps two of them on the device,
    :func:`resident_activation_bytes`)."""
    d, m = inner.kinds
    sw_dense, sw_moe = swapped_layers(cols, n_dense, n_moe)
    return cols.xp.where(cols["swap_activations"], sw_dense * d.activation_bytes + sw_moe * m.activation_bytes, 0.0)


def resident_activation_bytes(inner: Inner, n_dense: Any, n_moe: Any, xp: Any) -> Any:
    """Saved activations on the device under swapping: the layer in flight and the one prefetched, of the largest
    kind the stage holds."""
    d, m = inner.kinds
    largest = xp.maximum(xp.where(n_dense > 0, d.activation_bytes, 0.0), xp.where(n_moe > 0, m.activation_bytes, 0.0))
    return xp.minimum(n_dense + n_moe, 2) * largest
