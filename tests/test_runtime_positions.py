"""A GPT-style model (learned positions, LayerNorm, biases) with tensor and sequence parallelism trains with
the single-process losses: positions are added to the whole sequence, which then enters the
sequence-parallel region (Megatron-LM's LanguageModelEmbedding). fp32, gloo, 10 steps, 1e-5 relative."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from tests.test_runtime import STEPS, losses

GPT = '''name = "tiny-gpt"
num_layers = 2
hidden_size = 64
num_heads = 4
num_kv_heads = 4
head_dim = 16
ffn_hidden_size = 256
mlp = "plain"
vocab_size = 256
seq_len = 64
norm = "layernorm"
position = "learned"
attention_bias = true
mlp_bias = true
source = "assumed: a toy GPT-2-style shape for runtime tests"
'''


@pytest.mark.slow
def test_learned_positions_with_tp2_sp_match_single_process(tmp_path: Path) -> None:
    model = tmp_path / "gpt.toml"
    model.write_text(GPT)

    def plan(name: str, body: str) -> Path:
        path = tmp_path / f"{name}.toml"
        path.write_text(f'[job]\nmodel = "{model}"\n[plan]\nglobal_batch = 8\nmicro_batch = 2\n{body}\n')
        return path

    reference = losses(1, plan("one", ""), tmp_path / "one.jsonl")
    got = losses(2, plan("tp2sp", "tp = 2\nsp = true"), tmp_path / "tp2sp.jsonl")
    assert len(got) == STEPS
    assert got == pytest.approx(reference, rel=1e-5)
    assert got[-1] < got[0]
