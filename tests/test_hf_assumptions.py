"""What a Hugging Face ``config.json`` leaves unsaid is said: the training sequence length and where it comes from
(never silently the positional limit), the parameter counts, and every field read but not modelled, in the estimate's
table and in its JSON warnings. Configs: tests/data/hf_configs (sources in its SOURCES.md)."""

from __future__ import annotations

import json
from pathlib import Path

from inprocess import cli

from plait.workload.catalog import get_model
from plait.workload.hf_config import load_hf_config, model_from_hf_dict

CONFIGS = Path(__file__).parent / "data" / "hf_configs"
PHI3 = str(CONFIGS / "phi-3-mini-128k-instruct.json")
QWEN2 = str(CONFIGS / "qwen2-7b-instruct.json")


def _estimate(*argv: str) -> dict:
    code, out, err = cli(["estimate", *argv, "--gpus", "8", "--json"])
    assert code == 0, err
    return json.loads(out)


def test_phi3_trains_at_its_original_length_not_its_positional_limit() -> None:
    est = _estimate("--model", PHI3)
    # Phi-3-mini-128k: pre-trained at 4,096 (original_max_position_embeddings), extended to 131,072 by LongRoPE
    assert est["plan"]["seq_len"] == 4096
    said = [w for w in est["warnings"] if w.startswith("sequence length 4,096")]
    assert len(said) == 1 and "original_max_position_embeddings" in said[0] and "131,072" in said[0]
    assert any("sliding_window=262144" in w for w in est["warnings"])
    assert any("'longrope'" in w for w in est["warnings"])
    # the model card's count: 3.8B parameters (huggingface.co/microsoft/Phi-3-mini-128k-instruct, 3,821,079,552)
    assert est["params"] == {"total": 3_821_079_552, "active": 3_821_079_552}


def test_a_config_without_a_training_length_is_not_trained_at_its_limit() -> None:
    model = load_hf_config(Path(QWEN2))  # 32,768 positions, no training length stated
    assert model.seq_len == 8192 and "assumed" in model.seq_len_basis and "32,768" in model.seq_len_basis
    assert model.unmodelled == ()  # its sliding window is off (use_sliding_window false): nothing left out


def test_a_stated_sequence_length_is_not_said_to_be_assumed() -> None:
    est = _estimate("--model", PHI3, "--seq-len", "2048")
    assert est["plan"]["seq_len"] == 2048
    assert not any(w.startswith("sequence length") for w in est["warnings"])
    assert any("sliding_window" in w for w in est["warnings"])  # the fields not modelled stay said


def test_short_limits_and_learned_tables_are_the_training_length() -> None:
    base = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
            "intermediate_size": 128}
    assert model_from_hf_dict({**base, "max_position_embeddings": 4096}, "m").seq_len == 4096
    gpt2 = model_from_hf_dict({**base, "model_type": "gpt2", "n_positions": 32768}, "m")
    assert gpt2.seq_len == 32768 and "learned position table" in gpt2.seq_len_basis


def test_fields_not_modelled_are_listed() -> None:
    cfg = {"model_type": "gemma2", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
           "vocab_size": 100, "intermediate_size": 128, "max_position_embeddings": 8192, "sliding_window": 4096,
           "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "attention_dropout": 0.1,
           "rope_parameters": {"rope_type": "linear", "factor": 2.0}, "partial_rotary_factor": 0.5}
    notes = " | ".join(model_from_hf_dict(cfg, "m").unmodelled)
    for field in ("sliding_window=4096", "attn_logit_softcapping=50.0", "final_logit_softcapping=30.0",
                  "attention_dropout=0.1", "rope_parameters type 'linear'", "partial_rotary_factor=0.5"):
        assert field in notes


def test_table_shows_parameters_and_assumptions() -> None:
    code, out, err = cli(["estimate", "--model", PHI3, "--gpus", "8"])
    assert code == 0, err
    flat = " ".join(out.split())
    assert "parameters: 3.82 B" in flat
    assert "warning: sequence length 4,096" in flat


def test_moe_estimate_shows_active_parameters() -> None:
    est = _estimate("--model", "mixtral-8x7b")
    model = get_model("mixtral-8x7b")  # the catalog's published figures (47B total, 13B active), to half a unit
    assert abs(est["params"]["total"] - model.published_params) <= 0.5e9
    assert abs(est["params"]["active"] - model.published_active_params) <= 0.5e9
    assert est["params"]["active"] < est["params"]["total"]
    _, out, _ = cli(["estimate", "--model", "mixtral-8x7b", "--gpus", "8"])
    assert "active per token" in " ".join(out.split())


def test_plan_says_the_sequence_length_assumption_once_as_estimate_does() -> None:
    est = _estimate("--model", PHI3)
    said = [w for w in est["warnings"] if w.startswith("sequence length")]
    code, out, err = cli(["plan", "--model", PHI3, "--gpus", "8", "--top", "3", "--json"])
    assert code == 0, err
    found = json.loads(out)
    assert len(said) == 1 and found["warnings"] == said  # once, beside the plans, in estimate's words
    assert len(found["top"]) == 3 and all(said[0] not in p["warnings"] for p in found["top"])
    assert all(any("sliding_window=262144" in w for w in p["warnings"]) for p in found["top"])  # still per plan
    code, out, err = cli(["plan", "--model", PHI3, "--gpus", "8", "--top", "3"])
    assert code == 0, err
    assert out.count(said[0]) == 1 and f"warning: {said[0]}" in out.splitlines()
    code, out, err = cli(["plan", "--model", PHI3, "--gpus", "8", "--top", "1", "--seq-len", "2048", "--json"])
    assert code == 0 and json.loads(out)["warnings"] == []  # a stated length assumes nothing


def test_the_cost_objective_says_the_assumption_once() -> None:
    code, out, err = cli(["plan", "--model", PHI3, "--objective", "cost", "--gpus-range", "8:16", "--tokens", "1e11",
                          "--json"])
    assert code == 0, err
    assert [w[:21] for w in json.loads(out)["warnings"]] == ["sequence length 4,096"]
