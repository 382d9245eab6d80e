"""GLM steps and federated rounds predicted on a calibrated CPU cluster (plait.workloads.glm.run_cost,
plait.workloads.federated.loopback): hand-computed from a description whose every figure is chosen here, so each
term shows which calibrated figure it reads; gloo collectives take no NCCL LL protocol; the steady step of a run
(the operator counter is tested in tests/test_glm.py, which imports torch anyway)."""

from __future__ import annotations

from typing import Any

import pytest

from plait.cost.collectives import all_reduce_s, group_link
from plait.hardware.catalog import cluster_from_mapping
from plait.run.steady import steady_s
from plait.workloads.federated.loopback import loopback_round
from plait.workloads.federated.model import read_federated
from plait.workloads.glm.model import GlmSpec
from plait.workloads.glm.run_cost import emulated_switch_s, run_step_s
from tests.federated_toy import tiny_federation

SRC = "assumed: a test"


def fig(value: float) -> dict[str, Any]:
    return {"value": value, "source": SRC}


def curve(fraction: float) -> dict[str, Any]:
    return {"sizes": [128, 256], "fractions": [fraction, fraction], "source": SRC}


def cpu_cluster(memory_gb_per_s: float, gpus: int = 2, asynchronous: bool = False) -> Any:
    """A calibrated-style CPU description: DRAM ``memory_gb_per_s`` at a 0.5 streaming fraction, a 10 us op floor,
    20 us of dispatch per op, 1e-6 TFLOP/s fp32 at half of it, gloo 100 us per step at 1 GB/s."""
    accelerator = {
        "name": "test CPU", "memory_gib": 8.0, "memory_bandwidth_gb_per_s": memory_gb_per_s, "scale_up_link": "x",
        "scale_up_bandwidth_gb_per_s": 1.0, "pcie_bandwidth_gb_per_s": 1.0, "tdp_w": 0.0, "source": SRC,
        "peak_tflops": {"fp32": 1e-6, "bf16": 1e-6, "fp16": 1e-6}, "asynchronous_launch": asynchronous,
        "asynchronous_launch_source": SRC,
        "efficiency": {"matmul_bf16": curve(0.5), "matmul_fp8": curve(0.5), "matmul_fp32": curve(0.5), "attention": curve(0.5),
                       "memory": fig(0.5), "kernel_launch_us": fig(10.0), "host_launch_us": fig(20.0),
                       "comm_overlap": fig(0.0), "runtime_reserved_gib": fig(0.0), "allocator_overhead": fig(0.0)}}
    return cluster_from_mapping({
        "name": "test machine", "accelerator": accelerator, "gpus_per_node": gpus, "scale_up_domain_gpus": gpus,
        "tiers": [{"name": "local", "span_gpus": 1024, "bandwidth_gb_per_s_per_gpu": 1.0, "latency_us": 100.0,
                   "efficiency": curve(1.0), "source": SRC}],
        "price_per_gpu_hour_usd": 0.0, "price_source": SRC, "source": SRC, "host_memory_gib_per_gpu": 8.0,
        "host_memory_bandwidth_gb_per_s_per_gpu": 1.0, "host_memory_bandwidth_source": SRC}, "test")


TINY = GlmSpec(name="tiny", loss="squared", samples=64, features=8, batch=4)
"""Dense fp32: on 2 ranks data-parallel rows of 8 values (32 B), the model 8 floats (32 B)."""


def test_glm_steps_on_the_op_floor_read_the_calibrated_latency_and_dispatch() -> None:
    """Every pass under 1 us at 500 GB/s, so on the 10 us floor: 5 passes (reset, forward, slope, backward, update)
    50 us; all-reduce of 2 ranks: 2 steps of 100 us + 32 B (data-parallel: 8 floats; feature split: 4 floats,
    16 B) at 1 GB/s; 15 operators at 20 us, added (a CPU runs each op in its call)."""
    fast = cpu_cluster(1000.0)
    host = 15 * 20e-6
    assert run_step_s(TINY, fast, 2, "data_parallel", 15) == pytest.approx(50e-6 + 200e-6 + 32e-9 + host)
    assert run_step_s(TINY, fast, 2, "feature_partitioned", 15) == pytest.approx(50e-6 + 200e-6 + 16e-9 + host)
    # rank 0 as the switch: 16 B in, then 16 B out, one latency each
    assert emulated_switch_s(fast, 2, 16) == pytest.approx(2 * (100e-6 + 16e-9))
    assert run_step_s(TINY, fast, 2, "switch_aggregated", 15) == pytest.approx(50e-6 + 2 * (100e-6 + 16e-9) + host)


def test_glm_steps_at_the_calibrated_bandwidth() -> None:
    """At 1 MB/s x 0.5, data-parallel on 2 ranks (2 rows x 8 features): reset 32 B, forward 64 + 32 + 8 B,
    slope 3 x 2 x 4 B, backward 64 + 8 + 2 x 32 B, update 3 x 32 B: 392 B at 0.5 MB/s = 784 us, all above the
    floor."""
    slow = cpu_cluster(0.001)
    assert run_step_s(TINY, slow, 2, "data_parallel", 15) == pytest.approx(784e-6 + 200e-6 + 32e-9 + 15 * 20e-6)


def test_gloo_collectives_take_no_nccl_ll_protocol() -> None:
    """CPU ranks (no launch queue): the measured per-step latency; the same description as GPUs: NCCL's LL
    protocol's sub-microsecond steps win on a 32 B buffer."""
    assert all_reduce_s(32, group_link(cpu_cluster(1000.0), 2, 1)) == pytest.approx(200e-6 + 32e-9)
    assert all_reduce_s(32, group_link(cpu_cluster(1000.0, asynchronous=True), 2, 1)) < 20e-6


FEDERATED = tiny_federation(1.0, 0.5, "[3]", "[1.0]")


def test_a_loopback_round_reads_the_calibrated_cpu_and_gloo_not_the_clients_link(tmp_path: Any) -> None:
    """2 -> 3 -> 2, PFLEGO, tau = 3, 4 samples: 432 FLOPs (tests/test_federated.py's hand count) at 1e6 x 0.5
    FLOP/s = 864 us, plus 10 operators at 20 us; 2 clients on 2 ranks' cores; the body's 9 values (36 B) down to
    both and up from both at 1 GB/s after one 100 us latency each way. The TOML's T4, WAN link and stragglers play
    no part. 4 clients on the 2 cores: each computes at half a core."""
    path = tmp_path / "fed.toml"
    path.write_text(FEDERATED)
    spec = read_federated(path)
    two = loopback_round(spec, cpu_cluster(1000.0), "pflego", 2, 1.0, 10)
    assert two.compute_s == pytest.approx(864e-6 + 200e-6)
    assert two.transfer_s == pytest.approx(2 * (100e-6 + 2 * 36e-9))
    four = loopback_round(spec, cpu_cluster(1000.0), "pflego", 4, 1.0, 10)
    assert four.compute_s == pytest.approx(2 * (864e-6 + 200e-6))
    assert four.transfer_s == pytest.approx(2 * (100e-6 + 4 * 36e-9))


def test_the_steady_step_is_the_slowest_ranks_median_after_the_warm_up() -> None:
    """Per step the slowest rank: 2, 5, 2, 4, 3; after two warm-up steps the median of 2, 4, 3."""
    assert steady_s([[1.0, 5.0, 2.0, 2.0, 3.0], [2.0, 1.0, 2.0, 4.0, 1.0]], warmup=2) == 3.0
