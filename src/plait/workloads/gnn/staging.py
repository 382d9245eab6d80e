"""A batch's features sliced into a new host tensor and copied to the GPU from pageable memory
(``feat[ids].to(device)``: DGL's examples' ``load_subtensor`` and GNNLab's DGL baseline,
``torch.index_select(feat, 0, ids).to(device)``), beyond the bytes the gather itself moves:

- **first touch**: the new tensor, above glibc's largest mmap threshold (32 MiB), is a fresh mapping at each batch
  whose pages fault in as the gather first writes them (``data/staging.toml``: ``first_touch_s_per_page`` per
  4 KiB page); PyTorch's ``index_select`` writes its rows from its intra-op threads (aten ``index_select_out_cpu_``:
  ``at::parallel_for`` over the ids), so the faults spread over the loop's threads;
- **staged copy**: the CUDA driver copies a pageable buffer into pinned staging memory with the calling thread and
  DMAs it from there (CUDA Runtime API, "API synchronization behavior"), chunk after chunk, so the copy runs at the
  slower of one core's memcpy (``core_copy_bytes_per_s``) and the GPU's PCIe link.

Beside them, a loader's worker that gathers its own batch's rows on its one thread (SALIENT's sampler threads:
``fast_sampler.cpp`` ``serial_index``, a ``std::copy_n`` per row) gathers no faster than one core does
(random rows into a buffer already touched, a fixed cost a row and one a byte: ``core_gather_s_per_row``,
``core_gather_s_per_byte``).

The figures were measured on one host (``benchmarks/host_staging.py``) and are assumed for others.
"""

from __future__ import annotations

import functools
import tomllib
from importlib import resources

from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.hardware.figure import Figure

PAGE_BYTES = 4096
"""A host memory page (x86-64 Linux base pages)."""
MMAP_THRESHOLD_MAX_BYTES = 32 * 2**20
"""glibc's largest mmap threshold on 64-bit: a larger allocation is always a fresh mapping (``man mallopt``)."""


@functools.cache
def figures() -> dict[str, Figure]:
    """The figures of ``data/staging.toml``, each with its source."""
    data = tomllib.loads(resources.files("plait.workloads.gnn").joinpath("data/staging.toml").read_text())
    return {name: Figure(value=float(raw["value"]), source=raw["source"]) for name, raw in data.items()}


def first_touch_s(nbytes: float, threads: int = 1) -> float:
    """Seconds to fault in a fresh tensor of ``nbytes`` from ``threads`` threads (none below the mmap threshold)."""
    if threads < 1:
        raise ConfigError(f"threads={threads} must be >= 1")
    if nbytes <= MMAP_THRESHOLD_MAX_BYTES:
        return 0.0
    return -(-nbytes // PAGE_BYTES) * figures()["first_touch_s_per_page"].value / threads


def staged_copy_s(nbytes: float, cluster: Cluster) -> float:
    """Seconds to copy ``nbytes`` from pageable host memory to one GPU: one core's memcpy or the link, the slower."""
    link = cluster.accelerator.pcie_bandwidth_gb_per_s * 1e9
    return nbytes / min(link, figures()["core_copy_bytes_per_s"].value)


def core_gather_s(nbytes: float, row_bytes: int) -> float:
    """Seconds one core takes to gather ``nbytes`` of random feature rows of ``row_bytes`` each into a touched
    buffer: a fixed cost a row and one a byte (``data/staging.toml``, measured at 64-1024-byte rows)."""
    if row_bytes < 1:
        raise ConfigError(f"row_bytes={row_bytes} must be >= 1")
    per_row, per_byte = figures()["core_gather_s_per_row"].value, figures()["core_gather_s_per_byte"].value
    return nbytes / row_bytes * per_row + nbytes * per_byte


def loop_threads(cluster: Cluster, gpus_on_node: int, workers: int = 0) -> int:
    """Threads the loop's gather runs on: its GPU's share of the node's cores less the loader's busy workers; one
    where the cores are not stated (assumed: the loop's own thread)."""
    if gpus_on_node < 1 or workers < 0:
        raise ConfigError(f"gpus_on_node={gpus_on_node} must be >= 1 and workers={workers} >= 0")
    cores = cluster.host_cores_per_node
    return 1 if cores == 0 else max(1, cores // gpus_on_node - workers)


def pageable_extra_s(nbytes: float, cluster: Cluster, threads: int) -> float:
    """What slicing ``nbytes`` into a fresh tensor and copying it from pageable memory adds to a gather at the
    host's memory rate and a copy at the link's (module docstring)."""
    link = cluster.accelerator.pcie_bandwidth_gb_per_s * 1e9
    return first_touch_s(nbytes, threads) + staged_copy_s(nbytes, cluster) - nbytes / link
