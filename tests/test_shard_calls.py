"""DeepSpeed ZeRO-3 of 2021: tensors under ``stage3_param_persistence_threshold`` are never gathered, and each
per-tensor gather and reduce-scatter copies the group's ``g`` shards one ``copy_`` at a time (torch 1.8's list-form
collectives; plait.cost.shard_calls)."""

from __future__ import annotations

import dataclasses

import pytest

from plait.cost.shard_calls import gather_call_s, reduce_call_s
from plait.engine.catalog import get_engine
from plait.hardware.catalog import cluster_from_mapping
from plait.plan.ops import SCALAR
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.workload.catalog import get_model
from tests.conftest import toy_cluster_mapping


def test_a_call_waits_for_the_later_of_host_and_device() -> None:
    # 1000 ranks, 10 us to issue a copy, 5 us to run one: the host needs 10 ms, the device 5 ms after the collective
    assert gather_call_s(1e-3, 1000, 10.0, 5.0, SCALAR) == pytest.approx(10e-3)  # host-bound
    assert gather_call_s(8e-3, 1000, 10.0, 5.0, SCALAR) == pytest.approx(13e-3)  # collective, then the copies
    assert reduce_call_s(1e-3, 1000, 10.0, 5.0, SCALAR) == pytest.approx(11e-3)  # copies in, then the collective
    assert gather_call_s(0.0, 1000, 10.0, 5.0, SCALAR) == reduce_call_s(0.0, 1000, 10.0, 5.0, SCALAR) == 0.0


def test_gpt3_layer_vectors_persist() -> None:
    # GPT-3 Small, by hand: two LayerNorms (weight, bias), the q/k/v and output biases, the two MLP biases
    assert get_model("gpt3-125m").layer_vector_sizes(False) == (768,) * 4 + (3 * 768, 768, 3072, 768)


def test_deepspeed_2021_pays_its_per_rank_copies_on_four_gathers_and_twelve_reductions() -> None:
    mapping = toy_cluster_mapping(nvlink_gb_per_s=1e9)  # collectives of no duration: the copies alone remain
    mapping["accelerator"]["efficiency"]["kernel_launch_us"]["value"] = 10.0
    cluster = cluster_from_mapping(mapping, "toy")
    listed = get_engine("deepspeed@2021")
    flat = dataclasses.replace(listed, framework=dataclasses.replace(listed.framework, shard_list_collectives=False))
    model = get_model("gpt3-125m")
    plan = Plan(dp_shard=8, sharding="zero3", micro_batch=1, global_batch=16, seq_len=2048)  # 2 micro-batches
    copied, plain = (estimate(model, cluster, plan, engine=e).step_time_s for e in (listed, flat))
    copies_s = 8 * 10e-6  # one copy per rank of the group per call, on the device
    # per layer and micro-batch: the 4 matrices gathered for the forward and again for the backward, and the 12
    # tensors' gradients reduce-scattered one by one; plus the first layer's forward gathers, which nothing hides
    per_micro_batch = model.num_layers * (4 + 4 + 12) * copies_s + 4 * copies_s
    assert copied - plain == pytest.approx(2 * per_micro_batch, rel=1e-4)
