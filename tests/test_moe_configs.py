"""The published Hugging Face configs of the mixture-of-experts models (plait/validate/data/model_configs, copied from the
shared dataset; sources in its SOURCES.md) read faithfully: parameter counts against the model cards, which layers
are MoE, and which attend locally."""

from __future__ import annotations

import json

import pytest

from plait.errors import ConfigError
from plait.validate.datasets import dataset_path
from plait.workload.hf_config import load_hf_config, model_from_hf_dict
from plait.workload.model import LocalAttention

CONFIGS = dataset_path("dev").parent / "model_configs"

# (file, published total, published active, tolerance), each from the model's own card or paper:
# DeepSeek-V3 Technical Report (arXiv 2412.19437) abstract: 671B total, 37B activated (without its 14B MTP module);
# Qwen3 Technical Report (arXiv 2505.09388) Table 2 and the model cards: 30.5B/3.3B, 235B/22B;
# gpt-oss model card (arXiv 2508.10925) Table 1: 116.83B total, 5.13B active (active there excludes the
# embedding, 0.58B: checked below); Llama 4 Maverick model card: 400B total, 17B active; Grok-1 release
# (github.com/xai-org/grok-1 README): 314B.
# Tolerances: half a unit of the published figure's last digit, or 1% (2% where a figure has two digits).
PUBLISHED = [("deepseek-v3.json", 671e9, 37e9, 0.02), ("qwen3-30b-a3b.json", 30.5e9, 3.3e9, 0.02),
             ("qwen3-235b-a22b.json", 235e9, 22e9, 0.01), ("gpt-oss-120b.json", 116.83e9, None, 0.001),
             ("llama4-maverick.json", 400e9, 17e9, 0.02), ("grok-1.json", 314e9, None, 0.01)]


@pytest.mark.parametrize("name, total, active, tolerance", PUBLISHED)
def test_parameter_counts_are_the_published_ones(name: str, total: float, active: float | None,
                                                 tolerance: float) -> None:
    model = load_hf_config(CONFIGS / name)
    assert model.total_params() == pytest.approx(total, rel=tolerance)
    if active is not None:
        assert model.active_params() == pytest.approx(active, rel=tolerance)


def test_gpt_oss_active_parameters_without_the_embedding_are_the_cards() -> None:
    model = load_hf_config(CONFIGS / "gpt-oss-120b.json")
    assert model.active_params() - model.embedding_params() == pytest.approx(5.13e9, rel=0.01)


def test_moe_layers_follow_each_family_rule() -> None:
    deepseek, maverick = load_hf_config(CONFIGS / "deepseek-v3.json"), load_hf_config(CONFIGS / "llama4-maverick.json")
    assert [deepseek.is_moe_layer(i) for i in range(5)] == [False, False, False, True, True]  # first_k_dense_replace 3
    assert [i for i in range(48) if maverick.is_moe_layer(i)] == list(range(1, 48, 2))  # interleave_moe_layer_step 2
    assert maverick.ffn_hidden_size == 16384 and maverick.moe.expert_ffn_hidden_size == 8192  # intermediate_size_mlp
    assert maverick.moe.num_shared_experts == 1 and maverick.moe.shared_expert_ffn_hidden_size == 8192
    for model in (deepseek, maverick):  # every stage split counts the same layers as the whole model
        from plait.cost.params import stage_layer_counts
        from plait.plan.ops import SCALAR

        for pp in (1, 2, 3, 4, 8):
            counts = [stage_layer_counts(model, pp, s, SCALAR) for s in range(pp)]
            assert sum(m for _, m in counts) == model.num_moe_layers
            assert sum(d for d, _ in counts) == model.num_dense_layers


def test_local_attention_is_read_from_each_family_config() -> None:
    oss = load_hf_config(CONFIGS / "gpt-oss-120b.json")
    assert oss.local_attention == LocalAttention(kind="sliding", window=128, num_layers=18)
    assert oss.attention_sinks and oss.attention_bias and oss.mlp_bias and oss.moe.router_bias
    maverick = load_hf_config(CONFIGS / "llama4-maverick.json")  # chunked on the rope layers, NoPE every fourth
    assert maverick.local_attention == LocalAttention(kind="chunked", window=8192, num_layers=36)
    assert load_hf_config(CONFIGS / "qwen3-30b-a3b.json").local_attention is None  # use_sliding_window false


def test_local_attention_pairs_by_hand() -> None:
    """A window of 2 over 5 tokens: each query sees min(i + 1, 2) keys, 1 + 2 + 2 + 2 + 2 = 9 pairs; chunks of 2: 1 +
    2 per chunk, two and a half chunks counted as 7.5; a window longer than the sequence is full causal (15)."""
    assert LocalAttention(kind="sliding", window=2, num_layers=1).causal_pairs(5) == 9
    assert LocalAttention(kind="chunked", window=2, num_layers=1).causal_pairs(5) == 7.5
    assert LocalAttention(kind="sliding", window=8, num_layers=1).causal_pairs(5) == 15


@pytest.mark.parametrize("key, value, fragment", [("mlp_only_layers", [3], "mlp_only_layers=[3] is not modelled"),
                                                  ("moe_layer_freq", 2, "moe_layer_freq=2 is not modelled")])
def test_layouts_plait_does_not_model_are_refused_in_one_line(key: str, value: object, fragment: str) -> None:
    cfg = json.loads((CONFIGS / "qwen3-30b-a3b.json").read_text())
    with pytest.raises(ConfigError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        model_from_hf_dict({**cfg, key: value}, "qwen3")
