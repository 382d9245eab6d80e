"""FSDP2's copies on the compute stream: each ZeRO-3 all-gather is followed by a copy of the
gathered buffer into the parameters, and each reduce-scatter preceded by a copy of the gradients into its buffer
(torch ``_fully_shard/_fsdp_collectives.py``: ``foreach_all_gather_copy_out``, ``foreach_reduce_scatter_copy_in``);
engines whose gathered buffer is the parameters' storage (FSDP1, DeepSpeed, Megatron) copy nothing."""

from __future__ import annotations

import dataclasses

import pytest

from plait.engine.catalog import get_engine
from plait.hardware.catalog import cluster_from_mapping
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.workload.catalog import get_model
from tests.conftest import toy_cluster_mapping

MODEL = get_model("llama3-8b")
LAYER_PARAMS = 4096 * (4096 + 1024 + 1024 + 4096) + 3 * 4096 * 14336 + 2 * 4096
"""One Llama 3 8B layer, counted by hand: q, k, v, o (8 query groups of 128), the gated MLP, two RMSNorms."""


def test_fsdp2_pays_one_read_and_write_per_gather_and_per_gradient_copy() -> None:
    cluster = cluster_from_mapping(toy_cluster_mapping(network_gb_per_s=1000.0), "toy")
    titan = get_engine("torchtitan")
    flat = dataclasses.replace(titan, framework=dataclasses.replace(titan.framework, shard_copies=False))
    assert titan.framework.shard_copies and not get_engine("llm-foundry").framework.shard_copies
    plan = Plan(dp_shard=8, sharding="zero3", micro_batch=1, global_batch=16, seq_len=2048)  # 2 micro-batches
    copied, plain = (estimate(MODEL, cluster, plan, engine=e).step_time_s for e in (titan, flat))
    acc = cluster.accelerator
    bandwidth = acc.memory_bandwidth_bytes_per_s * acc.efficiency.memory.value
    # per layer and micro-batch: forward gather (bf16 read + write), backward re-gather (the same), gradient
    # copy-in (bf16 read, fp32 write: torchtitan reduces in fp32)
    per_layer = (2 * 2 + 2 * 2 + (2 + 4)) * LAYER_PARAMS / bandwidth
    assert copied - plain == pytest.approx(MODEL.num_layers * 2 * per_layer, rel=1e-6)
    zero2 = dataclasses.replace(plan, sharding="zero2")
    assert estimate(MODEL, cluster, zero2, engine=titan).step_time_s == estimate(MODEL, cluster, zero2,
                                                                                 engine=flat).step_time_s
