"""LAMB's optimizer step pass by pass (plait.workloads.traced.optimizer_passes): the sweeps of the multi-tensor
kernels in DeepLearningExamples' BERT (optimization.py @6fe463f BertLAMB; lamb_amp_opt @a9e2c1d5 FusedLAMBAMP),
counted by hand here, and their time at the sustained memory bandwidth; Composer's per-tensor AdamW loop
(plait.cost.optimizer_loop) likewise."""

from __future__ import annotations

import pytest

from plait.cost.compute import memory_bytes_per_s
from plait.cost.dataparallel import optimizer_step_s
from plait.cost.optimizer_loop import COMPOSER_ADAMW_BYTES_PER_PARAM
from plait.engine.catalog import get_engine
from plait.hardware.catalog import cluster_from_mapping, get_cluster
from plait.plan.columns import PlanColumns
from plait.plan.plan import Plan
from plait.workloads.traced.optimizer_passes import (
    BERT_LAMB_1907_AMP,
    BERT_LAMB_1907_FP32,
    BERT_LAMB_2111_AMP,
    BERT_LAMB_2111_TF32,
)
from tests.conftest import toy_cluster_mapping


def test_fp32_lamb_sweeps_thirteen_fp32_tensors_per_parameter() -> None:
    # grad norm (g), weight norm (p), stage 1 (read g p m v, write update m v), update norm, stage 2 (read p update,
    # write p): 13 accesses of 4 bytes, in both containers
    assert BERT_LAMB_1907_FP32.bytes_per_param == BERT_LAMB_2111_TF32.bytes_per_param == 13 * 4


def test_mixed_precision_lamb_adds_the_fp16_copy_and_halves_fp16_gradients() -> None:
    # pytorch:19.07: amp O2 keeps fp32 master gradients, then copies master -> fp16 model (read 4, write 2)
    assert BERT_LAMB_1907_AMP.bytes_per_param == BERT_LAMB_1907_FP32.bytes_per_param + 4 + 2
    # pytorch:21.11: the gradient (read 4 times, written once) is fp16, stage 2 also writes the fp16 weight, and
    # GradScaler's overflow check (fp16 only) reads and rewrites every fp16 gradient once
    assert BERT_LAMB_2111_AMP.bytes_per_param == BERT_LAMB_2111_TF32.bytes_per_param - 5 * 2 + 2 + 2 * 2


def test_a_lamb_step_moves_more_than_adams_one_pass() -> None:
    cluster, params = get_cluster("dgx1-v100"), 3.4e8
    plan = Plan(dp_replicate=8, sharding="none", micro_batch=16, global_batch=128, precision="fp16")
    adam_s = float(
        optimizer_step_s(cluster, PlanColumns.one(plan), {"dense": params, "expert": 0.0, "norms": 0.0}, 4.0)
    )
    lamb_s = BERT_LAMB_1907_AMP.step_s(cluster, params)
    assert lamb_s == pytest.approx(58 * params / memory_bytes_per_s(cluster.accelerator))
    assert lamb_s > 1.5 * adam_s


def test_composer_adamw_loop_sweeps_twenty_fp32_tensors_per_parameter() -> None:
    # DecoupledAdamW.adamw (composer v0.16.4 L252-264), weight_decay 0: exp_avg.mul_ (r1 w1), .add_(grad) (r2 w1),
    # exp_avg_sq.mul_ (r1 w1), .addcmul_(grad, grad) (r2 w1), sqrt (r1 w1), / c (r1 w1), .add_(eps) (r1 w1),
    # param.addcdiv_(exp_avg, denom) (r3 w1): 20 accesses of 4 bytes
    assert COMPOSER_ADAMW_BYTES_PER_PARAM == 20 * 4


@pytest.mark.parametrize(("optimizer", "loop_bytes"), [("adamw", 80.0), ("sgd", None)])
def test_a_per_tensor_adamw_loop_streams_its_bytes_and_leaves_other_optimizers(
    optimizer: str, loop_bytes: float | None
) -> None:
    cluster = cluster_from_mapping(toy_cluster_mapping(), "toy")  # 1000 GB/s at memory efficiency 1
    plan = Plan(dp_shard=8, sharding="zero3", micro_batch=1, global_batch=8, optimizer=optimizer)
    cols, params = PlanColumns.one(plan), {"dense": 8e9, "expert": 0.0, "norms": 0.0}
    fused = float(optimizer_step_s(cluster, cols, params, 4.0))
    loop = float(optimizer_step_s(cluster, cols, params, 4.0, adamw_per_tensor_ops=True))
    assert loop == pytest.approx(1e9 * loop_bytes / 1e12 if loop_bytes else fused, rel=1e-12)
    if loop_bytes:  # fused: read g 4, read and write master and both moments 24, write the bf16 copy 2
        assert fused == pytest.approx(1e9 * 30 / 1e12, rel=1e-12)


def test_llm_foundry_engines_run_composers_adamw_loop() -> None:
    for name in ("llm-foundry", "llm-foundry@2023-05"):
        assert get_engine(name).framework.adamw_per_tensor_ops
    assert not get_engine().framework.adamw_per_tensor_ops
