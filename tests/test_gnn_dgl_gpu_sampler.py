"""DGL's GPU sampler's host stream (plait.workloads.gnn.dgl_gpu_sampler): its CUDA calls and synchronizations as read
by hand in DGL 0.7.1's source, a hop's time from them, and the step they serialize."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.workloads.gnn import dgl_gpu_sampler as dgs
from plait.workloads.gnn.step import GnnEstimate
from plait.workloads.gnn.cost import estimate_gnn
from plait.workloads.gnn.loop import GnnLoop
from plait.workloads.gnn.model import GnnModel, GnnSpec, read_gnn
from plait.workloads.gnn.predict import predict_gnn
from plait.workloads.gnn.run import _checked_options
from plait.workloads.gnn.sampler import DGL_GPU, LOOP, parse_sampler
from plait.workloads.gnn.sampling import SampledBatch
from plait.workloads.gnn.validate import graphs, predict_row
from tests.gnn_row_files import first_row, job_toml

V100 = get_cluster("dgx1-v100")

# Read by hand at DGL tag 0.7.1 (https://github.com/dmlc/dgl/tree/0.7.1), one entry a CUDA call on the default stream.
SAMPLE_NEIGHBORS_CALLS = [
    ("src/array/cuda/rowwise_sampling.cu", 290, "_CSRRowWiseSampleDegreeKernel<<<>>>"),
    ("src/array/cuda/rowwise_sampling.cu", 304, "cub::DeviceScan::ExclusiveSum: init_kernel"),
    ("src/array/cuda/rowwise_sampling.cu", 304, "cub::DeviceScan::ExclusiveSum: scan kernel"),
    ("src/array/cuda/rowwise_sampling.cu", 318, "CopyDataFromTo(out_ptr -> &new_len): cudaMemcpyAsync D2H"),
    ("src/array/cuda/rowwise_sampling.cu", 353, "_CSRRowWiseSampleKernel<<<>>>"),
]
TO_BLOCK_CALLS = [
    ("src/graph/transform/cuda/cuda_to_block.cu", 386, "CopyDataFromTo(rhs_nodes -> src_nodes): D2D"),
    ("src/graph/transform/cuda/cuda_to_block.cu", 399, "CopyDataFromTo(edge src -> src_nodes): D2D"),
    ("src/runtime/cuda/cuda_hashtable.cu", 390, "OrderedHashTable(): cudaMemsetAsync, lhs table"),
    ("src/runtime/cuda/cuda_hashtable.cu", 390, "OrderedHashTable(): cudaMemsetAsync, rhs table"),
    ("src/graph/transform/cuda/cuda_to_block.cu", 223, "DeviceNodeMapMaker::Make: cudaMemsetAsync(count)"),
    ("src/runtime/cuda/cuda_hashtable.cu", 419, "generate_hashmap_duplicates<<<>>>"),
    ("src/runtime/cuda/cuda_hashtable.cu", 428, "count_hashmap<<<>>>"),
    ("src/runtime/cuda/cuda_hashtable.cu", 444, "cub::DeviceScan::ExclusiveSum: init_kernel"),
    ("src/runtime/cuda/cuda_hashtable.cu", 444, "cub::DeviceScan::ExclusiveSum: scan kernel"),
    ("src/runtime/cuda/cuda_hashtable.cu", 452, "compact_hashmap<<<>>>"),
    ("src/runtime/cuda/cuda_hashtable.cu", 476, "generate_hashmap_unique<<<>>>"),
    ("src/graph/transform/cuda/cuda_to_block.cu", 468, "CopyDataFromTo(count_lhs_device -> host): D2H"),
    ("src/graph/transform/cuda/cuda_to_block.cu", 297, "map_edge_ids<<<>>>"),
]
# A D2H copy on stream 0 is followed by cudaStreamSynchronize (src/runtime/cuda/cuda_device_api.cc lines 194-196).
HOP_SYNCS = [
    ("src/array/cuda/rowwise_sampling.cu", 318, "new_len"),
    ("src/graph/transform/cuda/cuda_to_block.cu", 468, "num_nodes_per_type (then StreamSync, line 476)"),
]
LOOP_SYNCS = {  # the validated scripts' own reads from the device each step
    "gnnlab example/dgl/multi_gpu/train_gcn.py@2d0dd92": ["input_nodes.to(feat.device) L179",
                                                          "output_nodes.to(label.device) L180"],
    "quiver examples/dgl/ogbn_products_sage_quiver.py@5a3bc77": ["loss.item() L188", ".sum().item() L189"],
}


def test_the_counts_are_the_calls_read_in_dgl_0_7_1() -> None:
    assert dgs.SAMPLE_NEIGHBORS_CUDA_CALLS == len(SAMPLE_NEIGHBORS_CALLS)
    assert dgs.TO_BLOCK_CUDA_CALLS == len(TO_BLOCK_CALLS)
    assert dgs.SYNCS_PER_HOP == len(HOP_SYNCS)
    assert all(dgs.LOOP_SYNCS_PER_STEP == len(reads) for reads in LOOP_SYNCS.values())


def test_a_hop_reads_the_offsets_of_every_node_reached_before_it() -> None:
    """DGL's blocks keep their destinations among their sources, so hop 2 draws from the 4 seeds and the 10 + 20
    nodes the first two hops reached: 2 sectors each beside its 30 drawn edges (with no launch floor)."""
    batch = _batch((10.0, 20.0, 30.0), (4.0, 10.0, 20.0, 30.0))
    assert dgs.hop_device_s(batch, 2, 32.0, 0.0) == pytest.approx(30 + 2 * (4 + 10 + 20))


def _batch(edges: tuple[float, ...], nodes: tuple[float, ...]) -> SampledBatch:
    zeros = tuple(0.0 for _ in edges)
    return SampledBatch(new_nodes=nodes, edges=edges, remote_nodes=nodes, remote_misses=0.0, scanned=zeros,
                        remote_scanned=zeros)


def test_a_small_batch_pays_the_host_per_hop() -> None:
    """Three hops of a few edges: the device's reads are nanoseconds, so each hop is 243 us of DGL's own host work,
    18 CUDA calls issued at 10 us (host_launch_us of the V100 preset) and two round trips of 26 us (host_sync_us):
    3 x (243 + 180 + 52) us = 1.425 ms."""
    eff = V100.accelerator.efficiency
    assert (eff.host_launch_us.value, eff.host_sync_us.value, eff.kernel_launch_us.value) == (10.0, 26.0, 5.0)
    small = _batch((10.0, 20.0, 30.0), (4.0, 10.0, 20.0, 30.0))
    assert dgs.sampling_s(small, V100, 900e9) == pytest.approx(3 * (243 + 180 + 52) * 1e-6)


def test_a_hop_whose_device_reads_outlast_its_issue_waits_for_them() -> None:
    """One hop drawing 10 M neighbours from 1 k seeds: 10 M sectors of 32 bytes plus 2 per seed's row offsets at
    1 TB/s is 320.064 us, plus 18 device launch floors of 5 us, past the 180 us of issue."""
    big = _batch((10e6,), (1e3, 1e6))
    device = (10e6 + 2 * 1e3) * 32 / 1e12 + 18 * 5e-6
    assert dgs.sampling_s(big, V100, 1e12) == pytest.approx(243e-6 + device + 52e-6)


def test_synchronized_sampling_puts_the_phases_one_after_another() -> None:
    """Sampling 1 s, fetch 2 s, training 3 s on the device and 4 s of dispatch: behind the sampler's syncs only the
    training hides the dispatch, 1 + 2 + 4 + 0.5 (the loop's syncs) = 7.5 s; without them the dispatch hides under
    all 6 s of device work."""
    parts = dict(strategy="replicated", batch=None, sampling_s=1.0, fetch_s=2.0, compute_s=3.0, all_reduce_s=0.0,
                 optimizer_s=0.0, fetch_bytes=0.0, memory_bytes=0.0, steps_per_epoch=1, host_s=4.0)
    assert GnnEstimate(**parts, synchronized_sampling=True, loop_sync_s=0.5).step_s == pytest.approx(7.5)
    assert GnnEstimate(**parts).step_s == pytest.approx(6.0)


def _spec(loader: str = "") -> GnnSpec:
    model = GnnModel(kind="sage", layers=3, hidden=256, fanouts=(15, 10, 5))
    return GnnSpec(name="p", graph=graphs()["ogbn-products"], model=model, loop=GnnLoop(loader=loader))


@pytest.mark.parametrize("batch", [64, 1024, 8000])
def test_dgls_sampler_never_beats_the_bare_loop(batch: int) -> None:
    """The same job: DGL's sampler adds host work and round trips, and serializes the step."""
    dgl = estimate_gnn(_spec(), V100, 1, batch, "replicated", library="dgl", sampler=DGL_GPU)
    bare = estimate_gnn(_spec(), V100, 1, batch, "replicated", library="dgl", sampler=LOOP)
    assert dgl.step_s >= bare.step_s
    assert dgl.sampling_s >= 3 * (dgs.DGL_HOP_HOST_US.value * 1e-6)


@pytest.mark.parametrize(("library", "loader", "fragment"),
                         [("pyg", "", "needs library 'dgl'"), ("dgl", "dgl-cpu", "no host loader")])
def test_dgls_sampler_refuses_other_libraries_and_host_loaders(library: str, loader: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        estimate_gnn(_spec(loader), V100, 1, 1024, "replicated",
                     library=library, sampler=DGL_GPU)  # type: ignore[arg-type]


def test_dgls_sampler_refuses_a_device_without_a_launch_queue() -> None:
    """A CPU device runs each op as it is issued: there are no CUDA calls to issue nor count read-backs to wait on."""
    cpu = replace(V100, accelerator=replace(V100.accelerator, asynchronous_launch=False))
    with pytest.raises(ConfigError, match="needs a GPU"):
        estimate_gnn(_spec(), cpu, 1, 1024, "replicated", library="dgl", sampler=DGL_GPU)


def test_plait_estimate_prices_a_validated_gpu_row_as_validation_does(tmp_path: Path) -> None:
    """Quiver's GPU-sampled row with every feature on the GPU (one RTX 3090) written as a GNN file: ``plait estimate
    --gnn-sampler dgl --gnn-library dgl --gnn-strategy replicated`` gives the row's prediction."""
    row = first_row(tmp_path, lambda r: r["source_id"] == "QUIVER_DGL_EX" and r["loader"] == "gpu"
                    and r["features_on"] == "gpu")
    toml = job_toml(tmp_path, row, graphs()["ogbn-products"])
    gpus, batch = int(row["gpus"]), int(row["batch_per_gpu"])
    job = predict_gnn(read_gnn(toml), get_cluster("rtx3090-workstation"), gpus, gpus * batch, "replicated",
                      library="dgl", sampler=parse_sampler("dgl"))
    assert 1.0 / job.estimate.epoch_s == pytest.approx(predict_row(row, graphs()).predicted_per_s)


def test_plait_run_refuses_dgls_sampler() -> None:
    with pytest.raises(ConfigError, match="costed by plait estimate, not run"):
        _checked_options("replicated", 0.0, "dgl")
