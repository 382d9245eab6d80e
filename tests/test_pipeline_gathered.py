"""A pipeline stage under PyTorch's pipelining with FSDP2 (torchtitan, plait run): gathered over the step's
micro-batches, gradients accumulated unsharded, one reduce-scatter after the last backward
(``EngineFacts.pipeline_keeps_gathered``), in memory and in time."""

from __future__ import annotations

from dataclasses import replace

import pytest

from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.workload.catalog import get_model

MODEL = get_model("llama3-8b")
CLUSTER = get_cluster("dgx-h100-ib")


def test_a_pipeline_stage_under_pytorch_pipelining_stays_gathered_with_unsharded_gradients() -> None:
    """torchtitan's FSDP2 + pipelining keeps a stage's bf16 parameters gathered and accumulates its gradients
    unsharded in fp32 (the reduce dtype) over the micro-batches: 2 + 4 bytes per parameter of the stage on top of
    the shards. Hand count for Llama 3 8B, pp=2 (16 layers a stage), tp=1: stage 0 also holds the embedding."""
    titan = get_engine("torchtitan")
    flat = replace(titan, framework=replace(titan.framework, pipeline_keeps_gathered=False))
    plan = Plan(pp=2, dp_shard=4, sharding="zero3", micro_batch=1, global_batch=8)
    kept = estimate(MODEL, CLUSTER, plan, engine=titan).memory
    resharded = estimate(MODEL, CLUSTER, plan, engine=flat).memory
    h, kv, ffn = 4096, 8 * 128, 14336
    layer = h * (2 * h + 2 * kv) + 3 * h * ffn + 2 * h
    stage = (kept.stage == 0) * MODEL.vocab_size * h + (kept.stage == 1) * (MODEL.vocab_size * h + h) + 16 * layer
    assert kept.weights_bytes - resharded.weights_bytes == pytest.approx(2 * stage)
    assert kept.gradients_bytes - resharded.gradients_bytes == pytest.approx(4 * stage)
    single = Plan(dp_shard=8, sharding="zero3", micro_batch=1, global_batch=8)  # no pipeline: resharded as before
    assert estimate(MODEL, CLUSTER, single, engine=titan).memory == estimate(MODEL, CLUSTER, single, engine=flat).memory


def test_a_gathered_pipeline_stage_reduce_scatters_once_after_its_last_backward() -> None:
    """The same stage in time: no gathers or reduce-scatters per micro-batch, and one reduce-scatter of the stage's
    fp32 gradients after the last backward, which nothing hides (PyTorch's ``perform_reduce_grad``), in the closed
    form and in the event simulation alike."""
    from plait.cost.links import collective_s

    titan = get_engine("torchtitan")
    flat = replace(titan, framework=replace(titan.framework, pipeline_keeps_gathered=False))
    plan = Plan(pp=2, dp_shard=4, sharding="zero3", micro_batch=1, global_batch=16)
    kept = estimate(MODEL, CLUSTER, plan, engine=titan, simulate=False)
    resharded = estimate(MODEL, CLUSTER, plan, engine=flat, simulate=False)
    assert kept.time.fsdp_comm_s == 0 and resharded.time.fsdp_comm_s > 0
    h, kv, ffn = 4096, 8 * 128, 14336
    stage = 16 * (h * (2 * h + 2 * kv) + 3 * h * ffn + 2 * h) + MODEL.vocab_size * h  # stage 0, with the embedding
    reduce = collective_s(CLUSTER, "reduce_scatter", 4, 1, 4.0 * stage)
    assert kept.time.dp_comm_s >= reduce * (1 - 1e-9)
    simulated = estimate(MODEL, CLUSTER, plan, engine=titan, simulate=True)
    assert simulated.step_time_s == pytest.approx(kept.step_time_s, rel=0.02)
