"""Layer (a): parameter counts against published exact counts and hand-computed toys."""

from __future__ import annotations

import pytest

from plait.workload.catalog import get_model, model_names
from plait.workload.model import ModelSpec, MoeSpec

# Exact totals of the released checkpoints (sum of tensor sizes in the Hugging Face safetensors index).
EXACT = {
    "llama3-8b": 8_030_261_248,
    "llama3.1-8b": 8_030_261_248,
    "llama2-7b": 6_738_415_616,
    "llama2-13b": 13_015_864_320,
    "mixtral-8x7b": 46_702_792_704,
}


@pytest.mark.parametrize("slug,count", EXACT.items())
def test_released_checkpoint_counts(slug: str, count: int) -> None:
    assert get_model(slug).total_params() == count


def test_gpt3_175b_matches_narayanan_eq2() -> None:
    """Narayanan et al. 2021, Eq. 2: P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h))."""
    m = get_model("gpt3-175b")
    l, h, v, s = m.num_layers, m.hidden_size, m.vocab_size, m.seq_len
    eq2 = 12 * l * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * l * h))
    assert m.total_params() == round(eq2) + 2 * h  # Eq. 2 omits the final LayerNorm (weight and bias)
    assert m.total_params() == pytest.approx(175e9, rel=0.003)


@pytest.mark.parametrize("slug", [s for s in model_names() if s.startswith("megatron-gpt")])
def test_megatron_sizes_follow_eq2(slug: str) -> None:
    m = get_model(slug)
    l, h, v, s = m.num_layers, m.hidden_size, m.vocab_size, m.seq_len
    assert m.total_params() == round(12 * l * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * l * h))) + 2 * h


def _significant_digits(x: float) -> int:
    return len(f"{x:.6e}".split("e")[0].replace(".", "").rstrip("0"))


@pytest.mark.parametrize("slug", model_names())
def test_catalog_within_two_percent_of_published(slug: str) -> None:
    """Every catalog entry reproduces its source's headline count: within 2%, or 4% when the source
    rounds to one or two significant digits ('7B', '1.7B')."""
    m = get_model(slug)
    assert m.source, f"{slug} has no source"
    tolerance = 0.04 if _significant_digits(m.published_params) <= 2 else 0.02
    assert m.total_params() == pytest.approx(m.published_params, rel=tolerance)
    if m.published_active_params:
        assert m.active_params() == pytest.approx(m.published_active_params, rel=0.02)


def test_toy_dense_by_hand() -> None:
    """h=4, 2 heads of 2, 1 kv head, gated ffn 8, vocab 10, 2 layers, RMSNorm, untied."""
    m = ModelSpec(name="toy", num_layers=2, hidden_size=4, num_heads=2, num_kv_heads=1, head_dim=2,
                  ffn_hidden_size=8, mlp="gated", vocab_size=10, seq_len=16)
    attention = 4 * 4 + 4 * 2 + 4 * 2 + 4 * 4  # q, k, v, o
    mlp = 3 * 4 * 8
    per_layer = attention + mlp + 2 * 4  # two RMSNorms
    assert m.total_params() == 10 * 4 + 2 * per_layer + 4 + 10 * 4


def test_toy_moe_active_by_hand() -> None:
    moe = MoeSpec(num_experts=4, top_k=1, expert_ffn_hidden_size=2, num_shared_experts=1,
                  shared_expert_ffn_hidden_size=2, num_dense_layers=1)
    m = ModelSpec(name="toy-moe", num_layers=2, hidden_size=4, num_heads=2, num_kv_heads=2, head_dim=2,
                  ffn_hidden_size=8, mlp="plain", vocab_size=10, seq_len=16, tied_embeddings=True, moe=moe)
    attention = 4 * 4 * 4
    dense_layer = attention + 2 * 4 * 8 + 2 * 4
    router = 4 * 4
    expert = 2 * 4 * 2
    moe_layer_total = attention + router + 4 * expert + expert + 2 * 4
    moe_layer_active = attention + router + 1 * expert + expert + 2 * 4
    assert m.total_params() == 40 + dense_layer + moe_layer_total + 4
    assert m.active_params() == 40 + dense_layer + moe_layer_active + 4
