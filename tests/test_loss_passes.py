"""The loss kernel and the training-metric passes an engine runs over each micro-batch's logits (plait.cost.loss)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from plait.engine.catalog import get_engine
from plait.hardware.catalog import cluster_from_mapping
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.workload.model import ModelSpec
from tests.conftest import toy_cluster_mapping

TOKENS, VOCAB, MICRO_BATCHES = 2048, 32768, 2
MODEL = ModelSpec(
    name="toy",
    num_layers=1,
    hidden_size=512,
    num_heads=4,
    num_kv_heads=4,
    head_dim=128,
    ffn_hidden_size=2048,
    vocab_size=VOCAB,
    seq_len=TOKENS,
    mlp="plain",
    norm="layernorm",
    position="learned",
)


def _step_s(**facts: object) -> float:
    engine = get_engine("llm-foundry")
    engine = replace(engine, framework=replace(engine.framework, **facts))
    plan = Plan(micro_batch=1, global_batch=MICRO_BATCHES)
    return estimate(MODEL, cluster_from_mapping(toy_cluster_mapping(), "toy"), plan, engine=engine).step_time_s


@pytest.mark.parametrize(
    ("facts", "bytes_per_logit"),
    [
        # two metric passes, each a bf16 -> fp32 cast (2 + 4 bytes) and an fp32 log_softmax (4 + 4)
        ({"train_metric_passes": 0}, 2 * (2 + 4 + 4 + 4)),
        # unfused loss: bf16 logits and an fp32 softmax, 2 + 4 + 4 bytes each way; fused: 2 + 2 each way
        ({"fused_cross_entropy": False}, -2 * ((2 + 4 + 4) - (2 + 2))),
    ],
)
def test_logit_passes_cost_their_bytes_at_hbm_bandwidth(facts: dict[str, object], bytes_per_logit: int) -> None:
    """On the toy GPU (1000 GB/s, every efficiency 1) each byte per logit costs TOKENS x VOCAB ns per micro-batch."""
    saved_s = _step_s() - _step_s(**facts)
    assert saved_s == pytest.approx(MICRO_BATCHES * TOKENS * VOCAB * bytes_per_logit / 1e12)
