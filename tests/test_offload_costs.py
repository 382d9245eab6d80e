"""Offload is costed as it runs: parameter offload still all-gathers and reduce-scatters over the
network, optimizer offload alone leaves parameters and gradients on the GPU, nothing crosses PCIe twice."""

from __future__ import annotations

import pytest

from plait.cost.prepared import layer_columns
from plait.engine.catalog import get_engine
from plait.engine.facts import DEFAULT
from plait.hardware.catalog import cluster_from_mapping
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.workload.catalog import get_model
from tests.conftest import toy_cluster_mapping

MODEL = get_model("llama3-8b")
BASE = dict(dp_shard=16, sharding="zero3", micro_batch=1, global_batch=16, seq_len=2048)


def _cluster(network_gb_per_s: float):
    return cluster_from_mapping(toy_cluster_mapping(network_gb_per_s=network_gb_per_s), "toy")


def test_parameter_offload_keeps_the_network_gathers() -> None:
    """Regression: offload_params used to replace the network all-gather by a PCIe copy of the whole layer and to
    drop the reduce-scatter, so on a slow network offload plans looked orders of magnitude faster."""
    cluster = _cluster(network_gb_per_s=1.0)
    offloaded = Plan(**BASE, offload_params=True, offload_optimizer=True).with_seq_len(2048)
    layer, plain = layer_columns(MODEL, cluster, Plan(**BASE).with_seq_len(2048), DEFAULT)
    _, offload = layer_columns(MODEL, cluster, offloaded, DEFAULT)
    params = layer.num_params
    pcie = 10e9  # toy accelerator: 10 GB/s PCIe
    assert plain.gather_s > 0 and plain.reduce_s > 0
    assert offload.gather_s == pytest.approx(plain.gather_s + 2 * params / 16 / pcie, rel=1e-12)
    assert offload.reduce_s == pytest.approx(plain.reduce_s + 4 * params / 16 / pcie, rel=1e-12)
    slow = estimate(MODEL, cluster, Plan(**BASE, offload_params=True, offload_optimizer=True), engine=get_engine())
    assert slow.step_time_s > estimate(MODEL, cluster, Plan(**BASE), engine=get_engine()).step_time_s


def test_optimizer_offload_alone_keeps_weights_and_gradients_on_the_gpu() -> None:
    cluster = _cluster(network_gb_per_s=10.0)
    only = estimate(MODEL, cluster, Plan(**BASE, offload_optimizer=True), engine=get_engine()).memory
    both = estimate(MODEL, cluster, Plan(**BASE, offload_optimizer=True, offload_params=True),
                    engine=get_engine()).memory
    assert only.optimizer_bytes == 0 and only.weights_bytes > 0 and only.gradients_bytes > 0
    assert both.weights_bytes == 0 and both.gradients_bytes == 0 and both.optimizer_bytes == 0


def test_offloaded_optimizer_step_moves_each_tensor_once() -> None:
    """With parameters offloaded the per-layer copies already move gradients down and weights stay on the host, so
    the optimizer step adds no second PCIe transfer; optimizer offload alone pays grads + bf16 weights once."""
    cluster = _cluster(network_gb_per_s=10.0)
    only = estimate(MODEL, cluster, Plan(**BASE, offload_optimizer=True), engine=get_engine()).time.optimizer_s
    both = estimate(MODEL, cluster, Plan(**BASE, offload_optimizer=True, offload_params=True),
                    engine=get_engine()).time.optimizer_s
    local = MODEL.total_params() / 16
    assert only - both == pytest.approx(local * (4 + 2) / 10e9, rel=1e-3)
