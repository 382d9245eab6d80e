"""A batch sliced into a new host tensor and copied from pageable memory (plait.workloads.gnn.staging): its first
touch and the driver's staged copy, in DGL's loops (the dgl-cpu loader, GPU sampling with host features)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.workloads.gnn.host import LoaderRates, host_step, loaders
from plait.workloads.gnn.sampling import SampledBatch
from plait.workloads.gnn.staging import (
    MMAP_THRESHOLD_MAX_BYTES,
    core_gather_s,
    figures,
    first_touch_s,
    loop_threads,
    pageable_extra_s,
    staged_copy_s,
)

RATES = LoaderRates(per_worker=1e6, serial=math.inf)
"""A pool sampling a million edges a second per worker, all of it shared out among them."""
FAST_RATES = LoaderRates(per_worker=1e8, serial=math.inf)

ONE_HOP = SampledBatch(
    new_nodes=(1e3, 299e3),
    edges=(3e5,),
    remote_nodes=(0.0, 0.0),
    remote_misses=0.0,
    scanned=(3e5,),
    remote_scanned=(0.0,),
)
"""One hop of 300k sampled edges drawn by 1,000 seeds (300k nodes in all), local, no cache."""


def test_every_staging_figure_names_its_source() -> None:
    assert figures() and all(
        f.source.startswith("measured by python benchmarks/host_staging.py") and f.value > 0 for f in figures().values()
    )


def test_first_touch_faults_each_page_of_a_fresh_mapping_over_the_threads() -> None:
    """Hand-computed: 64 MiB are 16,384 pages of 4 KiB, each one fault; 4 threads share them; a tensor below glibc's
    mmap threshold reuses the heap and faults nothing."""
    fault = figures()["first_touch_s_per_page"].value
    assert first_touch_s(64 * 2**20) == pytest.approx(16384 * fault)
    assert first_touch_s(64 * 2**20, threads=4) == pytest.approx(4096 * fault)
    assert first_touch_s(MMAP_THRESHOLD_MAX_BYTES) == 0.0
    with pytest.raises(ConfigError, match="threads=0"):
        first_touch_s(1e9, threads=0)


def test_a_staged_copy_runs_at_the_slower_of_one_core_and_the_link() -> None:
    """The RTX 3090's PCIe 4.0 x16 link (32 GB/s) outruns one core's memcpy, which then sets the copy's pace; a
    pageable copy is never faster than a pinned one over the same link."""
    box = get_cluster("rtx3090-workstation")
    core = figures()["core_copy_bytes_per_s"].value
    assert core < 32e9
    assert staged_copy_s(1e9, box) == pytest.approx(1e9 / core)
    slow_link = replace(box, accelerator=replace(box.accelerator, pcie_bandwidth_gb_per_s=core / 2e9))
    assert staged_copy_s(1e9, slow_link) == pytest.approx(2e9 / core)
    for cluster in (box, slow_link, get_cluster("gnnlab-v100x8")):
        assert pageable_extra_s(1e8, cluster, 1) > 0.0


def test_the_loop_gathers_on_its_gpus_share_of_the_cores_less_the_workers() -> None:
    """GNNLab's machine: 48 cores over 8 GPUs leave 6 to each loop, 1 once 5 workers sample beside it; a host whose
    cores are not stated: the loop's own thread."""
    gnnlab = get_cluster("gnnlab-v100x8")
    assert loop_threads(gnnlab, 8) == 6 and loop_threads(gnnlab, 8, workers=5) == 1
    assert loop_threads(gnnlab, 8, workers=40) == 1
    assert loop_threads(get_cluster("rtx3090-workstation"), 1, workers=4) == 1


def test_dgls_loop_pays_the_pageable_path_and_a_pinned_loader_does_not() -> None:
    """The same 300k-node batch of 100 fp32 features (120 MB) on one RTX 3090: DGL's loop (copy_from = pageable)
    adds the fresh tensor's faults to its slicing and copies at one core's rate; the same loader copying from pinned
    memory keeps the link's rate."""
    box = get_cluster("rtx3090-workstation")
    batch = ONE_HOP
    dgl = loaders()["dgl-cpu"]
    assert dgl.copy_from == "pageable"
    pageable = host_step(batch, dgl, RATES, 4, box, 100, 4, 0.01, gpus_on_node=1)
    pinned = host_step(batch, replace(dgl, copy_from="pinned"), RATES, 4, box, 100, 4, 0.01, gpus_on_node=1)
    rows = 300e3 * 100 * 4
    assert pageable.slicing_s == pytest.approx(pinned.slicing_s + first_touch_s(rows))
    assert pageable.transfer_s == pytest.approx(staged_copy_s(rows, box))
    assert pinned.transfer_s == pytest.approx(rows / 32e9)
    assert pageable.loop_s > pinned.loop_s


@pytest.mark.parametrize(
    "name, per_edge", [("pyg-neighborsampler", 24), ("salient", 16), ("pyg-neighborsampler-pageable", 8)]
)
def test_pygs_loops_copy_the_batchs_blocks_beside_its_rows(name: str, per_edge: int) -> None:
    """One hop of 300k sampled edges drawn by 1,000 seeds, 100 fp32 features a node: PyG's NeighborSampler moves
    each hop's adj_t (int64 rowptr, col, value = e_id) and e_id again (24 bytes an edge, 8 a seed); SALIENT's blocks
    hold rowptr, col and e_id (16); GNNLab's return_e_id=False, rowptr and col (8). The copy crosses the RTX 3090's
    32 GB/s link after the rows (their pinned or staged copy)."""
    box = get_cluster("rtx3090-workstation")
    batch = ONE_HOP
    loader = loaders()[name]
    step = host_step(batch, loader, RATES, 4, box, 100, 4, 0.01, gpus_on_node=1)
    rows = 300e3 * 100 * 4
    copy = staged_copy_s(rows, box) if loader.copy_from == "pageable" else rows / 32e9
    assert step.transfer_s == pytest.approx(copy + (per_edge * 3e5 + 8 * 1e3) / 32e9)


def test_salients_workers_gather_on_one_core_each_from_the_nodes_shared_memory() -> None:
    """A 300k-node batch of 128 fp16 features (256-byte rows, 76.8 MB) on a g5.24xlarge (204.8 GB/s of host memory,
    4 GPUs), 1e8 edges a second a worker: a SALIENT worker samples its 3e5 edges in 3 ms and gathers its rows alone,
    at one core's cost a row (about 40 ns + 0.22 ns x 256 bytes = 96 ns: 29 ms), 20 workers 20 batches side by side,
    1.6 ms a batch. Reading and writing a batch takes the pool 3 ms of its 51.2 GB/s with 4 GPUs training on the node,
    the pool's pace; alone on the node (204.8 GB/s) 0.75 ms, and the cores set it. PyG's loop gathers with the loop's
    threads, at the GPU's share of the memory."""
    box = get_cluster("aws-g5-24xlarge")
    assert box.host_memory_bytes_per_s_per_gpu * box.gpus_per_node == pytest.approx(204.8e9)
    batch = ONE_HOP
    rows = 300e3 * 128 * 2
    core_s = 300e3 * (figures()["core_gather_s_per_row"].value + 256 * figures()["core_gather_s_per_byte"].value)
    assert 0.025 < core_s < 0.032
    shared = host_step(batch, loaders()["salient"], FAST_RATES, 20, box, 128, 2, 0.001, gpus_on_node=4)
    assert shared.slicing_s == pytest.approx(core_s / 20)
    assert shared.batch_s == pytest.approx(3e-3 + core_s)
    assert shared.step_s == pytest.approx(2 * rows / 51.2e9)
    alone = host_step(batch, loaders()["salient"], FAST_RATES, 20, box, 128, 2, 0.001, gpus_on_node=1)
    assert alone.memory_s == pytest.approx(2 * rows / 204.8e9)
    assert alone.pool_s == pytest.approx((3e-3 + core_s) / 20)
    pyg = host_step(batch, loaders()["pyg-neighborsampler"], RATES, 20, box, 128, 2, 0.01, gpus_on_node=1)
    assert pyg.slicing_s == pytest.approx(2 * rows / 51.2e9) and pyg.memory_s == 0.0


@pytest.mark.parametrize("row_bytes, ns", [(64, 54.4), (200, 84.2), (1024, 264.7)])
def test_one_cores_gather_costs_a_row_and_a_byte(row_bytes: int, ns: float) -> None:
    """40.4 ns a row + 0.219 ns a byte (data/staging.toml): 64-byte rows 54.4 ns each, ogbn-products' 200-byte fp16
    rows 84.2 ns, 1024-byte rows 264.7 ns; a row of zero bytes is refused."""
    assert core_gather_s(1e6 * row_bytes, row_bytes) == pytest.approx(1e6 * ns * 1e-9, rel=1e-3)
    with pytest.raises(ConfigError):
        core_gather_s(1.0, 0)
