"""The host stream of DGL's GPU neighbour sampler and of the training loops around it (DGL 0.7.1).

Each hop of ``MultiLayerNeighborSampler`` on a graph held on the GPU is ``sample_neighbors`` then ``to_block``
(``BlockSampler.sample_blocks``, ``python/dgl/dataloading/dataloader.py`` at DGL 0.7.1 lines 320-349). Counted in
their CUDA code at DGL tag 0.7.1:

- ``sample_neighbors``, uniform without replacement (``CSRRowWiseSamplingUniform``,
  ``src/array/cuda/rowwise_sampling.cu`` lines 280-369): the degree kernel, CUB's ``ExclusiveSum`` of the degrees
  (two kernels: CUB's ``DispatchScan`` launches an ``init_kernel`` then the scan kernel,
  ``cub/device/dispatch/dispatch_scan.cuh``; the first call, with no temporary storage, only sizes it), the copy
  of the edge count to the host, the sampling kernel: :data:`SAMPLE_NEIGHBORS_CUDA_CALLS`;
- ``to_block`` (``ToBlockGPU``, ``src/graph/transform/cuda/cuda_to_block.cu`` lines 327-498, and
  ``src/runtime/cuda/cuda_hashtable.cu`` lines 375-482): two device copies gathering the seeds and the frontier's
  sources, three ``cudaMemsetAsync`` (the two hash tables' and the unique-count's), ``FillWithDuplicates`` (generate,
  count, CUB's scan's two kernels, compact), ``FillWithUnique`` (one kernel), the copy of the unique-source count to
  the host, ``map_edge_ids``: :data:`TO_BLOCK_CUDA_CALLS`.

Each hop waits on the device twice (:data:`SYNCS_PER_HOP`): both count copies go through ``GPUCopy``, which
synchronizes the default stream after a device-to-host copy (``src/runtime/cuda/cuda_device_api.cc`` lines 189-197;
both functions issue on stream 0; DGL 0.8.0, which Quiver's UnifiedTensor rows need, keeps both copies and the
synchronizing ``GPUCopy``). So a hop cannot run ahead of the device: it takes the host's Python and C++ work
(:data:`DGL_HOP_HOST_US`), the longer of the CUDA calls' issue (``host_launch_us`` each,
:func:`plait.cost.host.issue_s`) and their device work, and two round trips (``host_sync_us``,
:func:`plait.cost.host.sync_s`).

The loops of the validated scripts then wait on the device twice more a step (:data:`LOOP_SYNCS_PER_STEP`):
GNNLab's ``load_subtensor`` copies the input and output ids to the host (``example/dgl/multi_gpu/train_gcn.py`` at
2d0dd92 lines 179-180: ``input_nodes.to(feat.device)``, ``output_nodes.to(label.device)``), Quiver's reads the loss
and the correct count (``examples/dgl/ogbn_products_sage_quiver.py`` at 5a3bc77 lines 188-189: ``loss.item()``,
``.sum().item()``). Either way the next batch's sampling cannot overlap this step's training: its first hop's
synchronization waits for every kernel queued before it (GNNLab's loop, which reads no loss with ``pipelining``)
or the loss was read already (Quiver's). So the step is the sum of the sampler's hops, the feature fetch and the
training, whose device work alone can hide the host's dispatch of its kernels.

Not counted: the loader's own Python per batch (``_NodeDataLoaderIter.__next__``, ``NodeCollator.collate``), the
loops' ``block.int()`` (5-10 us of CPU a block by ``benchmarks/dgl_sampler_host.py``, and the cast's kernels), the
lazy CSC each block builds on the GPU on its first message passing (a sort of its COO), the input ids' copy to
the host with features in host memory (8 bytes a node over PCIe), and, of the device's work, all but the sampling's
reads (:func:`hop_device_s`): ``to_block``'s hash-table inserts, scans and per-edge lookups. Nor are the CUDA calls
outside the counts above: ``sample_neighbors``' event (``cudaEventCreate``, ``cudaEventRecord``,
``cudaEventSynchronize``, ``cudaEventDestroy``; ``rowwise_sampling.cu`` lines 312-370) and each output array's
``cudaMalloc`` (``NewIdArray``: three in ``sample_neighbors``, lines 267-269, four in ``to_block``, lines 286-287,
382 and 426), freed with ``cudaFree``, which waits for the device, when the blocks are dropped
(``cuda_device_api.cc`` ``AllocDataSpace`` and ``FreeDataSpace``, lines 97 and 103; only workspaces are pooled):
no per-call figure of either on these GPUs was found.
"""

from __future__ import annotations

from plait.cost.host import issue_s, sync_s
from plait.hardware.cluster import Cluster
from plait.hardware.figure import Figure
from plait.workloads.gnn.sampling import SampledBatch
from plait.workloads.gnn.sectors import SECTOR_BYTES

SAMPLE_NEIGHBORS_CUDA_CALLS = 5
"""CUDA calls of one hop's ``sample_neighbors`` on the GPU (module docstring)."""
TO_BLOCK_CUDA_CALLS = 13
"""CUDA calls of one hop's ``to_block`` on the GPU (module docstring)."""
HOP_CUDA_CALLS = SAMPLE_NEIGHBORS_CUDA_CALLS + TO_BLOCK_CUDA_CALLS
"""CUDA calls of one hop."""
SYNCS_PER_HOP = 2
"""Device-to-host count copies a hop waits on: one in ``sample_neighbors``, one in ``to_block``."""
LOOP_SYNCS_PER_STEP = 2
"""Synchronizations of the training loop per step outside the sampler (module docstring)."""
DGL_HOP_HOST_US = Figure(
    value=243.0,
    source="measured by OMP_NUM_THREADS=1 python benchmarks/dgl_sampler_host.py on 2026-12-07 (DGL 2.1.0 CPU wheel, "
           "torch 2.13 CPU build, one thread, the 2-core development VM, an AMD EPYC of family 25 model 17 (Zen 4) "
           "by /proc/cpuinfo, at load average 0.6-1.4): the "
           "least-squares intercept (no edge drawn) of NeighborSampler([5, 10, 15]).sample_blocks's CPU time a hop "
           "over 1-16 seeds, median of 3 runs 242.7 us (228.6-310.6; 315.8 in a fourth beside the test suite at load "
           "1.8: CPU time grows with the load); assumed for the rows' hosts and for DGL "
           "0.7.1's Python layer, which builds the same frontier graph, block, frames and id columns a hop")
"""Host time of one hop's Python and C++ work outside its CUDA calls (module docstring)."""


def hop_device_s(sampled: SampledBatch, hop: int, hbm_bytes_per_s: float, kernel_launch_s: float) -> float:
    """Device seconds of hop ``hop``: a random 32-byte sector per neighbour drawn and two per row it draws from (the
    row's offsets), the sectors :func:`plait.workloads.gnn.sampler.sampling_time_s` charges a GPU sampler (there two
    per node of the batch), at the HBM's streaming rate, and the device's floor per call of the hop's
    :data:`HOP_CUDA_CALLS`. A hop draws from every node reached before it:
    a block's sources begin with its destinations, and the next hop samples from all its sources (``seed_nodes =
    block.srcnodes[ntype].data[NID]``, ``dataloader.py`` line 348)."""
    frontier = sum(sampled.new_nodes[: hop + 1])
    sectors = sampled.edges[hop] + 2 * frontier
    return sectors * SECTOR_BYTES / hbm_bytes_per_s + HOP_CUDA_CALLS * kernel_launch_s


def sampling_s(sampled: SampledBatch, cluster: Cluster, hbm_bytes_per_s: float) -> float:
    """Seconds of one batch's hops on DGL's GPU sampler, each ended by its count copies (module docstring): per hop
    the host's own work, the longer of its CUDA calls' issue and their device work, and its round trips."""
    acc = cluster.accelerator
    # the same every hop: its own host work, its calls' issue (DGL's C++ calls CUDA directly: no PyTorch dispatch
    # before each) and its round trips
    host, issue = DGL_HOP_HOST_US.value * 1e-6, HOP_CUDA_CALLS * issue_s(acc, eager=False)
    waits = SYNCS_PER_HOP * sync_s(cluster)
    kernel_launch_s = float(acc.efficiency.kernel_launch_us.value) * 1e-6
    total = 0.0
    for hop in range(len(sampled.edges)):
        total += host + max(issue, hop_device_s(sampled, hop, hbm_bytes_per_s, kernel_launch_s)) + waits
    return total


def loop_syncs_s(cluster: Cluster) -> float:
    """Seconds of the loop's own round trips per step (:data:`LOOP_SYNCS_PER_STEP`)."""
    return LOOP_SYNCS_PER_STEP * sync_s(cluster)
