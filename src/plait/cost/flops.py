"""FLOPs of one transformer layer, per rank and micro-batch, and the MFU convention.

GEMM shapes follow Megatron-LM tensor parallelism (Shoeybi et al. 2019, Sec. 3):
column-parallel q/k/v and MLP-up, row-parallel output and MLP-down, each sharded by
``tp``. A GEMM of an ``m x k`` by ``k x n`` product costs ``2mnk`` FLOPs; its backward
is two GEMMs of the same cost (input and weight gradients) — Narayanan et al. 2021,
Sec. 5.1 ("backward pass ... twice the forward").

Attention-core FLOPs: ``QK^T`` and ``PV`` cost ``2 s^2 d`` each per head (Narayanan
et al. 2021, Eq. 3 and Appendix). A causal flash kernel skips the upper triangle, so
executed FLOPs are about half, plus the diagonal blocks. Flash attention's backward
runs five matmuls against the forward's two, 2.5x the forward FLOPs (Dao 2023,
FlashAttention-2, Sec. 3.1-3.2).

Model FLOPs for MFU use the PaLM convention (Chowdhery et al. 2022, Appendix B):
``6 N + 12 L H Q T`` per token, N the non-embedding matmul parameters touched per
token (the output projection included), attention counted non-causal.
"""

from __future__ import annotations

from dataclasses import dataclass

from plait.cost.setup import Setup
from plait.frozen import direct_init
from plait.kept import Kept
from plait.workload.model import ModelSpec


@direct_init
@dataclass(frozen=True)
class Gemm:
    """An ``m x k`` by ``k x n`` product executed ``count`` times."""

    m: int
    n: int
    k: int
    count: int = 1

    @property
    def flops(self) -> float:
        """FLOPs of all ``count`` products."""
        return 2.0 * self.m * self.n * self.k * self.count


def attention_gemms(setup: Setup) -> list[Gemm]:
    """Projection GEMMs of one attention block on one TP rank (forward)."""
    model, t, tokens, h = setup.model, setup.plan.tp, setup.tokens, setup.model.hidden_size
    heads = model.num_heads // t
    if model.mla:
        m = model.mla
        q = ([Gemm(tokens, m.q_lora_rank, h), Gemm(tokens, heads * model.qk_head_dim, m.q_lora_rank)]
             if m.q_lora_rank else [Gemm(tokens, heads * model.qk_head_dim, h)])
        kv = [Gemm(tokens, m.kv_lora_rank + m.qk_rope_head_dim, h),
              Gemm(tokens, heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank)]
        return q + kv + [Gemm(tokens, h, heads * m.v_head_dim)]
    kv = setup.kv_heads_per_rank
    qkv_n = heads * model.head_dim + kv * model.head_dim * 2
    return [Gemm(tokens, qkv_n, h), Gemm(tokens, h, heads * model.head_dim)]


def mlp_gemms(setup: Setup, tokens: int, ffn: int, count: int = 1) -> list[Gemm]:
    """Up and down GEMMs of ``count`` MLPs of width ``ffn`` over ``tokens`` tokens on one TP rank."""
    h, f = setup.model.hidden_size, ffn // setup.plan.tp
    up = 2 * f if setup.model.mlp == "gated" else f
    return [Gemm(tokens, up, h, count), Gemm(tokens, h, f, count)]


def moe_gemms(setup: Setup) -> list[Gemm]:
    """Router, routed-expert and shared-expert GEMMs of one MoE block (balanced routing)."""
    model, plan = setup.model, setup.plan
    assert model.moe is not None
    moe = model.moe
    local_experts = moe.num_experts // plan.ep
    tokens_per_expert = max(setup.tokens * moe.top_k * plan.ep // moe.num_experts, 1)
    gemms = [Gemm(setup.tokens, moe.num_experts, model.hidden_size)]
    gemms += mlp_gemms(setup, tokens_per_expert, moe.expert_ffn_hidden_size, local_experts)
    if moe.num_shared_experts:
        gemms += mlp_gemms(setup, setup.tokens, moe.shared_expert_ffn_hidden_size * moe.num_shared_experts)
    return gemms


def mlp_block_gemms(setup: Setup, moe_layer: bool) -> list[Gemm]:
    """Forward GEMMs of one layer's MLP (or MoE) block on one rank."""
    return moe_gemms(setup) if moe_layer else mlp_gemms(setup, setup.tokens, setup.model.ffn_hidden_size)


def layer_gemms(setup: Setup, moe_layer: bool) -> list[Gemm]:
    """All forward GEMMs of one layer on one rank."""
    return attention_gemms(setup) + mlp_block_gemms(setup, moe_layer)


def head_gemm(setup: Setup) -> Gemm:
    """The output projection (vocab-parallel over TP) on the last stage."""
    return Gemm(setup.tokens, -(-setup.model.vocab_size // setup.plan.tp), setup.model.hidden_size)


def flash_head_dim(head_dim: int) -> int:
    """Head dimension a flash kernel computes with: kernels exist for multiples of 32 up to 192 and for 256,
    and a head is run by the next one up (FlashAttention-2 csrc/flash_attn/flash_api.cpp,
    ``head_size_rounded = head_size <= 192 ? round_multiple(head_size, 32) : 256``), so MPT-30B's 112
    computes as 128."""
    return -(-head_dim // 32) * 32 if head_dim <= 192 else 256


def attention_core_flops(setup: Setup) -> float:
    """Forward FLOPs of ``QK^T`` and ``PV`` on one rank for one micro-batch, in the convention of the rates
    they are divided by.

    Flash: causal at the kernel's head dimension (:func:`flash_head_dim`), counted as half the square, as
    flash-attn's benchmarks and the FlashAttention-2/3 papers count it ("with causal mask, we divide this
    number by 2", Dao 2023, Sec. 4.1); the extra work of the diagonal blocks is inside those measured rates,
    so it is not added again. Unfused: the full score matrix is computed and masked. Layers with sliding-window
    or chunked attention compute only their (query, key) pairs (:meth:`plait.workload.model.ModelSpec.
    attention_pairs_per_layer`, the mean over layers), at the same rate (assumed: window-skipping flash kernels,
    FlashAttention-2's ``window_size``, run their blocks as fast as causal ones).
    """
    model, plan = setup.model, setup.plan
    heads = model.num_heads // plan.tp
    s = setup.seq_len
    flash = setup.attention_kernel != "unfused"
    qk, v = ((flash_head_dim(model.qk_head_dim), flash_head_dim(model.v_head_dim)) if flash
             else (model.qk_head_dim, model.v_head_dim))
    per_pair = 2.0 * (qk + v)
    full = plan.micro_batch * heads * s * s * per_pair / plan.cp
    local = model.attention_pairs_per_layer(s) / (s * (s + 1) / 2)  # < 1 with sliding or chunked layers
    return (full / 2 if flash else full) * local


def model_flops_per_token(model_setup: Setup) -> float:
    """PaLM-convention training FLOPs per token (forward + backward, no recompute)."""
    return _flops_per_token(model_setup.model, model_setup.seq_len)


_KEPT: Kept[float] = Kept(256)


def kept_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """:func:`model_flops_per_token`, kept by (model, sequence length), all it reads (a single plan's estimate asks
    for it each time); the entry holds the model (:class:`plait.kept.Kept`)."""
    key = (id(model), seq_len)
    return _KEPT.get(key, (model,), lambda: _flops_per_token(model, seq_len))


def _flops_per_token(model: ModelSpec, seq_len: int) -> float:
    dense = model.num_dense_layers * (model.attention_params() + model.mlp_params(model.ffn_hidden_size))
    moe = model.num_moe_layers * (model.attention_params() + model.moe_layer_active_mlp_params()) if model.moe else 0
    matmul_params = dense + moe + model.vocab_size * model.hidden_size
    attention = 6.0 * model.num_layers * seq_len * model.num_heads * (model.qk_head_dim + model.v_head_dim)
    return 6.0 * matmul_params + attention
