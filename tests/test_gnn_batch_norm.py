"""PyTorch 1.8's per-channel CUDA batch norm of a 2-D training input (plait.workloads.gnn.batch_norm), by hand from
the kernels' launch configuration in aten/src/ATen/native/cuda/Normalization.cuh before PyTorch PR #57034."""

from dataclasses import replace

import pytest

from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.hardware.figure import Figure
from plait.workloads.gnn.batch_norm import per_channel_latency_s, takes_per_channel_path

V100 = get_cluster("dgx1-v100").accelerator


def test_ogbn_arxiv_hidden_output_on_a_v100_by_hand() -> None:
    """169,343 x 256 fp32 (the DGL 0.5 benchmark's ogbn-arxiv GraphSAGE hidden output) on a V100 (80 SMs, 2,048
    threads and 32 blocks an SM): 256 channel blocks of 32 x 16 threads all fit (80 x 4 = 320), and each of a block's
    16 lane-0 threads reads 10,584 rows one after another (169,343 / 16, rounded up), once for the statistics and
    twice backward. The transform runs 256 x 1,024 blocks of 32 x 2 threads (grid y = min(262,144 / 256, 84,672)),
    80 x 32 = 2,560 at a time: 103 rounds (262,144 / 2,560 = 102.4) of 83 reads (169,343 / 2,048, rounded up)."""
    latency_s = V100.efficiency.dram_latency_ns.value * 1e-9
    fwd_s, bwd_s = per_channel_latency_s(169_343, 256, V100)
    assert fwd_s == pytest.approx((10_584 + 103 * 83) * latency_s)
    assert bwd_s == pytest.approx(2 * 10_584 * latency_s)
    assert 5e-3 < fwd_s < 7e-3 and 5e-3 < bwd_s < 8e-3  # some 300 ns a read (a pointer chase on a V100)


def test_channels_beyond_one_wave_of_blocks_walk_twice() -> None:
    """321 channel blocks of 512 threads do not fit 80 SMs x 4 at once: the walks run in two rounds."""
    latency_s = V100.efficiency.dram_latency_ns.value * 1e-9
    _, bwd_320 = per_channel_latency_s(200_000, 320, V100)
    _, bwd_321 = per_channel_latency_s(200_000, 321, V100)
    assert bwd_320 == pytest.approx(2 * 12_500 * latency_s)
    assert bwd_321 == pytest.approx(2 * bwd_320)


def test_cudnn_takes_up_to_131070_rows_and_the_fused_kernels_never_take_this_path() -> None:
    """Normalization.cpp at v1.8.1: ``input.dim() == 2 && input.size(0) <= 131070 && training`` goes to cuDNN."""
    assert not takes_per_channel_path("per_channel", 131_070)
    assert takes_per_channel_path("per_channel", 131_071)
    assert not takes_per_channel_path("fused", 10_000_000)


def test_no_stated_latency_charges_nothing_extra() -> None:
    unknown = replace(V100, efficiency=replace(V100.efficiency, dram_latency_ns=Figure(value=0.0, source="x")))
    assert per_channel_latency_s(169_343, 256, unknown) == (0.0, 0.0)
    assert per_channel_latency_s(169_343, 256, replace(V100, streaming_multiprocessors=0)) == (0.0, 0.0)


def test_a_layer_pays_the_larger_of_the_streamed_and_latency_bound_times() -> None:
    """A 3-layer GraphSAGE of width 256 on ogbn-arxiv's 169,343 nodes: two hidden batch norms. With PyTorch 1.8's
    kernels each costs its latency bound (12 ms) instead of its 32 streamed bytes an element (1.8 ms at 776 GB/s)."""
    from plait.cost.compute import memory_bytes_per_s
    from plait.workloads.gnn.compute import layer_compute_s
    from plait.workloads.gnn.datasets import graphs
    from plait.workloads.gnn.model import GnnModel, GnnSpec

    graph = graphs()["ogbn-arxiv"]
    sizes = [(float(graph.nodes), float(graph.stored_edges))] * 3

    def spec(kernels: str) -> GnnSpec:
        return GnnSpec(name="arxiv", graph=graph, model=GnnModel(kind="sage", layers=3, hidden=256, fanouts=(1, 1, 1),
                                                                   batch_norm=True, batch_norm_kernels=kernels))

    fused = layer_compute_s(spec("fused"), sizes, V100, "spmm")
    slow = layer_compute_s(spec("per_channel"), sizes, V100, "spmm")
    streamed_s = 32 * graph.nodes * 256 / memory_bytes_per_s(V100)
    bound_s = sum(per_channel_latency_s(graph.nodes, 256, V100))
    for layer in (0, 1):
        assert slow[layer] - fused[layer] == pytest.approx(bound_s - streamed_s)
    assert slow[2] == fused[2]  # the last layer has no batch norm


@pytest.mark.parametrize(("release", "kernels"), [("1.8.1", "per_channel"), ("1.7.0", "per_channel"),
                                                  ("1.9.0", "fused"), ("2.0.1", "fused"), ("", "fused")])
def test_a_pytorch_release_picks_the_kernels(release: str, kernels: str) -> None:
    from plait.workloads.gnn.batch_norm import release_kernels

    assert release_kernels(release) == kernels


def test_a_release_that_is_no_version_is_refused() -> None:
    from plait.workloads.gnn.batch_norm import release_kernels

    with pytest.raises(ConfigError, match="'latest'"):
        release_kernels("latest")


def test_only_the_dgl_benchmark_rows_state_pytorch_1_8() -> None:
    """The DGL 0.5 benchmark's README: "DGL v0.6.1, PyG v1.7.0, PyTorch 1.8.1, CUDA 11.1"; SALIENT's GIN rows, whose
    batch norms also see large batches, state no release and keep the fused kernels."""
    from pathlib import Path

    from plait.validate.records import read_records
    from plait.workloads.gnn import validate

    path = Path(validate.__file__).parents[2] / "validate" / "data" / "gnn_epochs.csv"
    rows = read_records(path, "gnn", validate.COLUMNS)
    slow = {r["source_id"] for r in rows if validate._batch_norm_kernels(r) == "per_channel"}
    assert slow == {"DGL05_BENCH"}
    assert all("PyTorch 1.8.1" in r["notes"] for r in rows if r["source_id"] == "DGL05_BENCH")


def test_an_sm_too_small_for_the_kernels_blocks_is_refused_in_one_line() -> None:
    """The statistics and backward kernels launch 32 x 16 = 512-thread blocks: an SM of 256 threads holds none."""
    with pytest.raises(ConfigError, match="max_threads_per_sm=256 holds no 512-thread block"):
        per_channel_latency_s(169_343, 256, replace(V100, max_threads_per_sm=256))


@pytest.mark.parametrize("name", ["streaming_multiprocessors", "max_threads_per_sm", "max_blocks_per_sm"])
def test_a_negative_residency_figure_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match=f"{name}=-1 must be >= 0"):
        replace(V100, **{name: -1})
