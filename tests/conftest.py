"""Shared fixtures: a toy accelerator and cluster with round numbers for hand-computed tests."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from plait.hardware.catalog import cluster_from_mapping
from plait.hardware.cluster import Cluster

SOURCE = "assumed: round numbers for hand-computed tests"

# The CLI's rendering tests read output the way a pipe gets it: pytest-xdist's workers set COLUMNS=80 and
# LINES=24 (a terminal's size), which plait honours as the reader's width (plait/terminal.py).
for _size in ("COLUMNS", "LINES"):
    os.environ.pop(_size, None)


def toy_cluster_mapping(nvlink_gb_per_s: float = 100.0, network_gb_per_s: float = 10.0) -> dict:
    """8 GPUs per node, 1000 TFLOP/s bf16, 1000 GB/s HBM, every efficiency 1, latency 0."""
    fig = lambda v: {"value": v, "source": SOURCE}  # noqa: E731
    return {
        "name": "toy",
        "accelerator": {
            "name": "toy-gpu", "memory_gib": 80.0, "memory_bandwidth_gb_per_s": 1000.0,
            "peak_tflops": {"bf16": 1000.0, "fp8": 2000.0}, "scale_up_link": "toy-link",
            "scale_up_bandwidth_gb_per_s": nvlink_gb_per_s, "pcie_bandwidth_gb_per_s": 10.0, "tdp_w": 1.0,
            "source": SOURCE,
            "efficiency": {"matmul_bf16": fig(1.0), "matmul_fp8": fig(1.0), "attention": fig(1.0), "memory": fig(1.0),
                           "kernel_launch_us": fig(0.0), "comm_overlap": fig(1.0), "runtime_reserved_gib": fig(0.0), "allocator_overhead": fig(0.0)},
        },
        "gpus_per_node": 8, "scale_up_domain_gpus": 8,
        "tiers": [
            {"name": "nvlink", "span_gpus": 8, "bandwidth_gb_per_s_per_gpu": nvlink_gb_per_s, "latency_us": 0.0,
             "efficiency": fig(1.0), "source": SOURCE},
            {"name": "net", "span_gpus": 1024, "bandwidth_gb_per_s_per_gpu": network_gb_per_s, "latency_us": 0.0,
             "efficiency": fig(1.0), "source": SOURCE},
        ],
        "price_per_gpu_hour_usd": 2.0, "price_source": SOURCE, "host_memory_gib_per_gpu": 100.0,
        "host_memory_bandwidth_gb_per_s_per_gpu": 50.0, "host_memory_bandwidth_source": SOURCE, "source": SOURCE,
    }


@pytest.fixture
def toy_cluster() -> Cluster:
    return cluster_from_mapping(toy_cluster_mapping(), "toy")


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` imported as a module (the scripts are not a package)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def empty_kept(*clusters: Cluster) -> None:
    """Empty what estimates keep for later ones (per-layer quantities, FSDP times, checked plans, the engine's
    verdicts) and each cluster's group links and collective times: the next estimate computes everything afresh."""
    from plait.kept import empty_all

    empty_all()
    for cluster in clusters:
        cluster.link_cache.clear()
