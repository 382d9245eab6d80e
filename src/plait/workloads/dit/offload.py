"""Layer-wise weight offload for DiT inference (001-02: ChunkFlow, arXiv 2605.11335): the weights stay in
host memory and each layer's are prefetched over the GPU's PCIe link while the layer before computes, so a step
takes the longer of its compute and the weights' stream, and the GPU keeps two layers' weights (the one computing,
the one arriving).

Where the GPUs talk over PCIe too (no NVLink: the accelerator's scale-up link is PCIe), the prefetch and the
sequence-parallel collectives share the link: ChunkFlow's first-order model (Sec. 3) bounds the step by the link
carrying both, which its chunked prefetch (yielding to the collectives) attains; with NVLink the collectives travel
apart and only the prefetch uses PCIe.
"""

from __future__ import annotations

from plait.hardware.cluster import Cluster


def pcie_carries_collectives(cluster: Cluster) -> bool:
    """The GPUs of a node reach each other over PCIe (the accelerator names no NVLink or other fabric)."""
    link = cluster.accelerator.scale_up_link.lower()
    return link.startswith(("none", "pcie"))


def streamed_bytes_per_step(params: float, element_bytes: int, shards: int) -> float:
    """Weights streamed in per step (each layer's once): this GPU's ``1 / shards`` of the blocks' parameters
    (``shards``: PipeFusion stages x tensor-parallel degree)."""
    return params * element_bytes / shards


def offloaded_step_s(compute_s: float, comm_s: float, weight_bytes: float, cluster: Cluster) -> float:
    """One step with every layer's weights streamed in over PCIe (module docstring); ``comm_s``: the step's
    communication left exposed without offload."""
    stream_s = weight_bytes / (cluster.accelerator.pcie_bandwidth_gb_per_s * 1e9)
    if pcie_carries_collectives(cluster):
        return max(compute_s, stream_s + comm_s)
    return max(compute_s, stream_s) + comm_s
