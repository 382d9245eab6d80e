"""Eager PyTorch's unfused pointwise ops and K/V head copies (torchtitan's reference modules).

Expected bytes are counted here by hand from the ops of torchtitan's RMSNorm, complex rotary embedding,
SwiGLU and repeat_kv (each op reads its inputs and writes its output), not taken from the code under test.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from plait.engine.catalog import get_engine
from plait.engine.facts import EngineFacts, Pointwise
from plait.hardware.cluster import Cluster
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.workload.catalog import get_model
from plait.workload.model import ModelSpec

HBM = 1000e9  # toy HBM bytes/s, efficiency 1


def _step_s(model: ModelSpec, cluster: Cluster, pointwise: Pointwise = "fused", kv_repeat: bool = False) -> float:
    plan = Plan(micro_batch=1, global_batch=1)
    engine = replace(get_engine(), framework=EngineFacts(pointwise=pointwise, kv_repeat=kv_repeat))
    return estimate(model, cluster, plan, engine=engine).step_time_s


def test_eager_llama_moves_the_hand_counted_bytes(toy_cluster: Cluster) -> None:
    """Llama 3 8B shapes, bf16: per token and layer the eager forward moves, beyond the fused kernels,
    2 RMSNorms x (cast 6 + square 8 + mean 4 + scale 8 + cast 6 + weight 4 - fused 4) = 2 x 32 bytes per hidden
    element, 16 bytes per rotated q/k element (fp32 cast, complex multiply, cast back, less the fused 4), and
    2 bytes x 2 per SwiGLU element (silu then multiply, less the fused 6). Backward moves twice the forward's."""
    model = replace(get_model("llama3-8b"), num_layers=1)
    tokens, d = model.seq_len, model.hidden_size
    per_token = 2 * 32 * d + 16 * (32 + 8) * 128 + 2 * 2 * model.ffn_hidden_size
    extra = 3 * per_token * tokens / HBM  # forward + backward (2x)
    diff = _step_s(model, toy_cluster, "eager") - _step_s(model, toy_cluster, "fused")
    assert diff == pytest.approx(extra, rel=1e-9)


def test_gpt_style_layers_have_no_unfused_extra(toy_cluster: Cluster) -> None:
    """LayerNorm is one native kernel in eager PyTorch, GELU one kernel; no rotary, no grouped K/V."""
    model = replace(get_model("gpt3-1.3b"), num_layers=1)
    assert model.norm == "layernorm" and model.mlp == "plain" and model.num_kv_heads == model.num_heads
    assert _step_s(model, toy_cluster, "eager") == pytest.approx(_step_s(model, toy_cluster, "fused"), rel=1e-12)


def test_kv_repeat_pays_the_copies(toy_cluster: Cluster) -> None:
    """repeat_kv reads the 8 grouped K and V heads and writes 32 copies of each (bf16, 128 wide) per token."""
    model = replace(get_model("llama3-8b"), num_layers=1)
    per_token = 2 * (8 + 32) * (128 + 128)
    diff = _step_s(model, toy_cluster, kv_repeat=True) - _step_s(model, toy_cluster)
    assert diff == pytest.approx(3 * per_token * model.seq_len / HBM, rel=1e-9)
    mha = replace(model, num_kv_heads=model.num_heads)
    assert _step_s(mha, toy_cluster, kv_repeat=True) == pytest.approx(_step_s(mha, toy_cluster), rel=1e-12)
