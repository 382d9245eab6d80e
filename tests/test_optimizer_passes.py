"""LAMB's optimizer step pass by pass (plait.workloads.traced.optimizer_passes): the sweeps of the multi-tensor
kernels in DeepLearningExamples' BERT (optimization.py @6fe463f BertLAMB; lamb_amp_opt @a9e2c1d5 FusedLAMBAMP),
counted by hand here, and their time at the sustained memory bandwidth."""

from __future__ import annotations

import pytest

from plait.cost.compute import memory_bytes_per_s
from plait.cost.dataparallel import optimizer_step_s
from plait.hardware.catalog import get_cluster
from plait.plan.columns import PlanColumns
from plait.plan.plan import Plan
from plait.workloads.traced.optimizer_passes import (
    BERT_LAMB_1907_AMP,
    BERT_LAMB_1907_FP32,
    BERT_LAMB_2111_AMP,
    BERT_LAMB_2111_TF32,
)


def test_fp32_lamb_sweeps_thirteen_fp32_tensors_per_parameter() -> None:
    # grad norm (g), weight norm (p), stage 1 (read g p m v, write update m v), update norm, stage 2 (read p update,
    # write p): 13 accesses of 4 bytes, in both containers
    assert BERT_LAMB_1907_FP32.bytes_per_param == BERT_LAMB_2111_TF32.bytes_per_param == 13 * 4


def test_mixed_precision_lamb_adds_the_fp16_copy_and_halves_fp16_gradients() -> None:
    # pytorch:19.07: amp O2 keeps fp32 master gradients, then copies master -> fp16 model (read 4, write 2)
    assert BERT_LAMB_1907_AMP.bytes_per_param == BERT_LAMB_1907_FP32.bytes_per_param + 4 + 2
    # pytorch:21.11: the gradient (read 4 times, written once) is fp16, and stage 2 also writes the fp16 weight
    assert BERT_LAMB_2111_AMP.bytes_per_param == BERT_LAMB_2111_TF32.bytes_per_param - 5 * 2 + 2


def test_a_lamb_step_moves_more_than_adams_one_pass() -> None:
    cluster, params = get_cluster("dgx1-v100"), 3.4e8
    plan = Plan(dp_replicate=8, sharding="none", micro_batch=16, global_batch=128, precision="fp16")
    adam_s = float(
        optimizer_step_s(cluster, PlanColumns.one(plan), {"dense": params, "expert": 0.0, "norms": 0.0}, 4.0)
    )
    lamb_s = BERT_LAMB_1907_AMP.step_s(cluster, params)
    assert lamb_s == pytest.approx(58 * params / memory_bytes_per_s(cluster.accelerator))
    assert lamb_s > 1.5 * adam_s
