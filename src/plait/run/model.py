"""A decoder-only transformer built from the estimator's ModelSpec.

Legend of shape suffixes: B batch, S sequence, D model width, H query heads, K key/value
heads, E head dim, F MLP width, V vocabulary. Head counts inside a module are the local
ones (``-1`` in views) so the same code runs unsharded and tensor-parallel.

References: pre-norm decoder (Radford et al. 2019), RMSNorm (Zhang & Sennrich 2019),
rotary embeddings (Su et al. 2021), grouped-query attention (Ainslie et al. 2023) through
``scaled_dot_product_attention``, SwiGLU (Shazeer 2020); MoE layers take their block from
:mod:`plait.run.moe`. Layers live in a ``ModuleDict`` so
that pipeline stages can drop layers while parameter names stay global (checkpoints and
reference runs line up).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from plait.errors import ConfigError
from plait.workload.model import ModelSpec

ROPE_THETA = 10000.0  # Su et al. 2021, Eq. 15 base


def check_supported(spec: ModelSpec) -> None:
    """Refuse model features this reference implementation does not build."""
    if spec.mla:
        raise ConfigError(f"plait run builds standard attention; {spec.name} has multi-head latent attention (MLA)")
    if spec.position == "alibi":
        raise ConfigError(f"plait run supports rope and learned positions, not alibi ({spec.name})")


def rope_tables(head_dim: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of shape ``[S, E/2]``."""
    inv_freq = 1.0 / ROPE_THETA ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x_BSHE: torch.Tensor, cos_SE: torch.Tensor, sin_SE: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]) by position-dependent angles."""
    seq = x_BSHE.shape[1]
    x1, x2 = x_BSHE[..., 0::2], x_BSHE[..., 1::2]
    cos, sin = cos_SE[None, :seq, None, :].to(x_BSHE.dtype), sin_SE[None, :seq, None, :].to(x_BSHE.dtype)
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class Attention(nn.Module):
    """Causal (grouped-query) self-attention."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.head_dim = spec.head_dim
        self.rope = spec.position == "rope"
        self.repeats = spec.num_heads // spec.num_kv_heads
        self.recompute_core = False
        self.context_core: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None = None
        """Context parallelism on torch.distributed primitives (:func:`plait.run.context.train_context`): the
        causal attention of this rank's queries over every cp rank's keys, set for the step."""
        bias = spec.attention_bias
        self.wq = nn.Linear(spec.hidden_size, spec.num_heads * spec.head_dim, bias=bias)
        self.wk = nn.Linear(spec.hidden_size, spec.num_kv_heads * spec.head_dim, bias=bias)
        self.wv = nn.Linear(spec.hidden_size, spec.num_kv_heads * spec.head_dim, bias=bias)
        self.wo = nn.Linear(spec.num_heads * spec.head_dim, spec.hidden_size, bias=bias)

    def _core(self, q_BHSE: torch.Tensor, k_BHSE: torch.Tensor, v_BHSE: torch.Tensor) -> torch.Tensor:
        if self.context_core is not None:
            return self.context_core(q_BHSE, k_BHSE, v_BHSE)
        return F.scaled_dot_product_attention(q_BHSE, k_BHSE, v_BHSE, is_causal=True)

    def forward(self, x_BSD: torch.Tensor, cos_SE: torch.Tensor, sin_SE: torch.Tensor) -> torch.Tensor:
        b, s = x_BSD.shape[:2]
        q_BSHE = self.wq(x_BSD).view(b, s, -1, self.head_dim)
        k_BSKE = self.wk(x_BSD).view(b, s, -1, self.head_dim)
        v_BSKE = self.wv(x_BSD).view(b, s, -1, self.head_dim)
        if self.rope:
            q_BSHE, k_BSKE = apply_rope(q_BSHE, cos_SE, sin_SE), apply_rope(k_BSKE, cos_SE, sin_SE)
        k_BSHE = k_BSKE.repeat_interleave(self.repeats, dim=2)
        v_BSHE = v_BSKE.repeat_interleave(self.repeats, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q_BSHE, k_BSHE, v_BSHE))
        if self.recompute_core and self.training and self.context_core is None:  # plait's CP attention saves
            # only q, k, v, the output and its log-sum-exp (no score matrix): recomputing it would only re-send
            o_BHSE = checkpoint(self._core, q, k, v, use_reentrant=False)  # selective: Korthikanti et al. 2022
        else:
            o_BHSE = self._core(q, k, v)
        return self.wo(o_BHSE.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    """Plain (GELU) or gated (SwiGLU) MLP."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.gated = spec.mlp == "gated"
        bias = spec.mlp_bias
        self.w1 = nn.Linear(spec.hidden_size, spec.ffn_hidden_size, bias=bias)
        self.w2 = nn.Linear(spec.ffn_hidden_size, spec.hidden_size, bias=bias)
        self.w3 = nn.Linear(spec.hidden_size, spec.ffn_hidden_size, bias=bias) if self.gated else None

    def forward(self, x_BSD: torch.Tensor) -> torch.Tensor:
        if self.w3 is not None:
            return self.w2(F.silu(self.w1(x_BSD)) * self.w3(x_BSD))
        return self.w2(F.gelu(self.w1(x_BSD)))


def _norm(spec: ModelSpec) -> nn.Module:
    if spec.norm == "rmsnorm":
        return nn.RMSNorm(spec.hidden_size, eps=1e-5)
    return nn.LayerNorm(spec.hidden_size, bias=spec.norm_bias)


def _feed_forward(spec: ModelSpec, layer: int) -> nn.Module:
    from plait.run import moe  # imported here: moe builds its experts from FeedForward

    return moe.MoeFeedForward(spec) if moe.is_moe_layer(spec, layer) else FeedForward(spec)


class Block(nn.Module):
    """Pre-norm transformer layer (number ``layer`` of the model: MoE or dense MLP)."""

    def __init__(self, spec: ModelSpec, layer: int) -> None:
        super().__init__()
        self.attention_norm = _norm(spec)
        self.attention = Attention(spec)
        self.ffn_norm = _norm(spec)
        self.feed_forward = _feed_forward(spec, layer)

    def forward(self, x_BSD: torch.Tensor, cos_SE: torch.Tensor, sin_SE: torch.Tensor) -> torch.Tensor:
        h_BSD = x_BSD + self.attention(self.attention_norm(x_BSD), cos_SE, sin_SE)
        return h_BSD + self.feed_forward(self.ffn_norm(h_BSD))


class Transformer(nn.Module):
    """Embedding, layers, final norm, output projection. Stages of a pipeline hold a subset:
    ``tok_embeddings`` only on the first, ``norm``/``output`` only on the last."""

    def __init__(self, spec: ModelSpec, seq_len: int) -> None:
        super().__init__()
        check_supported(spec)
        self.spec = spec
        self.tok_embeddings: nn.Module | None = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.pos_embeddings: nn.Module | None = (
            nn.Embedding(seq_len, spec.hidden_size) if spec.position == "learned" else None)
        self.layers = nn.ModuleDict({str(i): Block(spec, i) for i in range(spec.num_layers)})
        self.norm: nn.Module | None = _norm(spec)
        self.output: nn.Module | None = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)
        cos, sin = rope_tables(spec.head_dim, seq_len)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, tokens_or_h: torch.Tensor) -> torch.Tensor:
        h_BSD = tokens_or_h
        if self.tok_embeddings is not None:
            h_BSD = self.tok_embeddings(tokens_or_h)
            if self.pos_embeddings is not None:
                h_BSD = h_BSD + self.pos_embeddings.weight[: tokens_or_h.shape[1]]
        for layer in self.layers.values():  # rope tables are sliced to the (gathered) sequence inside attention
            h_BSD = layer(h_BSD, self.rope_cos, self.rope_sin)
        if self.norm is not None:
            h_BSD = self.norm(h_BSD)
        return self.output(h_BSD) if self.output is not None else h_BSD


def init_weights(model: Transformer, seed: int) -> None:
    """Deterministic init keyed by parameter name, so any subset (a pipeline stage) matches the whole model.

    Normal(0, 0.02) for matrices and embeddings (Radford et al. 2019), ones for norm weights, zeros for biases.
    """
    for name, param in model.named_parameters():
        generator = torch.Generator().manual_seed(seed + sum(ord(c) * (i + 1) for i, c in enumerate(name)))
        with torch.no_grad():
            if name.endswith("bias"):
                param.zero_()
            elif param.dim() == 1:
                param.fill_(1.0)
            else:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.02)


def build_model(spec: ModelSpec, seq_len: int, seed: int, keep_layers: list[int] | None = None,
                first: bool = True, last: bool = True) -> Transformer:
    """Build on the meta device, keep this rank's part, materialise on CPU and initialise."""
    with torch.device("meta"):
        model = Transformer(spec, seq_len)
    if keep_layers is not None:
        for name in list(model.layers):
            if int(name) not in keep_layers:
                del model.layers[name]
    if not first:
        model.tok_embeddings = None
        model.pos_embeddings = None
    if not last:
        model.norm = None
        model.output = None
    model.to_empty(device="cpu")
    cos, sin = rope_tables(spec.head_dim, seq_len)
    model.rope_cos, model.rope_sin = cos, sin
    init_weights(model, seed)
    return model
