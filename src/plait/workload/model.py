"""Decoder-only transformer descriptions (dense, GQA/MQA, gated MLPs, MoE, MLA).

Parameter counts follow the layer definitions of Vaswani et al. 2017 and the
Megatron-LM layout (Shoeybi et al. 2019, Sec. 3): per layer an attention block
(q/k/v/o projections) and an MLP block, each behind a norm. GQA (Ainslie et al. 2023)
shrinks k/v to ``num_kv_heads``; a gated MLP (Shazeer 2020, "GLU Variants") has three
matrices instead of two; MoE layers (Fedus et al. 2021; Jiang et al. 2024, Mixtral)
replace the MLP with routed experts plus optional shared experts (DeepSeek-V3,
arXiv 2412.19437 Sec. 2.1.2).

Multi-head latent attention (DeepSeek-V2 arXiv 2405.04434 Sec. 2.1; V3 Sec. 2.1.1) is
counted exactly for parameters and projection FLOPs (low-rank q and kv down/up
projections). Its attention core is approximated as standard multi-head attention with
query/key head dim ``qk_nope_head_dim + qk_rope_head_dim`` and value head dim
``v_head_dim`` for all ``num_heads`` heads, which is what training kernels materialise
after the up-projection (the compressed-KV trick only pays off at inference).
"""

# Annotations are evaluated here, not kept as strings (no `from __future__ import annotations`): dataclasses and
# plait.schema would otherwise parse and compile each field's type string when a process starts
# (tests/test_lazy_imports.py).

from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from plait.errors import ConfigError

MlpKind = Literal["plain", "gated"]
NormKind = Literal["rmsnorm", "layernorm"]
PositionKind = Literal["rope", "learned", "alibi"]


@dataclass(frozen=True, kw_only=True)
class MoeSpec:
    """Mixture-of-experts layers (token-choice top-k routing)."""

    num_experts: int
    """Routed experts per MoE layer."""
    top_k: int
    """Routed experts each token is sent to."""
    expert_ffn_hidden_size: int
    """Intermediate size of one routed expert's MLP."""
    num_shared_experts: int = 0
    """Experts every token passes through (DeepSeek-style)."""
    shared_expert_ffn_hidden_size: int = 0
    """Intermediate size of one shared expert (0 when there are none)."""
    num_dense_layers: int = 0
    """Leading layers that keep the dense MLP (``ffn_hidden_size``) instead of MoE (DeepSeek-V3
    ``first_k_dense_replace``)."""
    layer_step: int = 1
    """Past the leading dense layers, layer ``i`` (from 0) is MoE when ``(i + 1) % layer_step == 0`` and the others
    keep the dense MLP (Llama 4 ``interleave_moe_layer_step``, Qwen3-MoE ``decoder_sparse_step``, DeepSeek-V3
    ``moe_layer_freq``: the rule of their ``transformers`` modelling code); 1: every layer."""
    router_bias: bool = False
    """A bias on the router's logits (gpt-oss)."""

    def __post_init__(self) -> None:
        _positive(self.num_experts, "moe.num_experts")
        _positive(self.layer_step, "moe.layer_step")
        _positive(self.top_k, "moe.top_k")
        _positive(self.expert_ffn_hidden_size, "moe.expert_ffn_hidden_size")
        if self.top_k > self.num_experts:
            raise ConfigError(f"moe.top_k={self.top_k} must be <= moe.num_experts={self.num_experts}")
        for name in ("num_shared_experts", "shared_expert_ffn_hidden_size", "num_dense_layers"):
            if getattr(self, name) < 0:
                raise ConfigError(f"moe.{name}={getattr(self, name)} must be >= 0")
        if self.num_shared_experts and not self.shared_expert_ffn_hidden_size:
            raise ConfigError("moe.shared_expert_ffn_hidden_size must be > 0 when num_shared_experts > 0")


@dataclass(frozen=True, kw_only=True)
class LocalAttention:
    """Layers whose attention sees only nearby keys: a sliding window (Mistral, gpt-oss ``sliding_attention``) or
    fixed chunks (Llama 4 ``attention_chunk_size``)."""

    kind: Literal["sliding", "chunked"]
    """``sliding``: each query sees the ``window`` keys before it; ``chunked``: the keys of its own ``window``-token
    chunk up to itself."""
    window: int
    """Window or chunk length in tokens."""
    num_layers: int
    """Layers that attend locally; the others attend to the whole sequence."""

    def __post_init__(self) -> None:
        if self.kind not in ("sliding", "chunked"):
            raise ConfigError(f"local_attention.kind={self.kind!r} must be sliding or chunked")
        _positive(self.window, "local_attention.window")
        if self.num_layers < 0:
            raise ConfigError(f"local_attention.num_layers={self.num_layers} must be >= 0")

    def causal_pairs(self, seq_len: int) -> float:
        """(query, key) pairs one head computes over a ``seq_len`` sequence: ``s w - w (w - 1) / 2`` for a
        window ``w < s`` (each query sees ``min(i + 1, w)`` keys), ``(s / w) w (w + 1) / 2`` for chunks (a
        causal square per chunk, a partial last one counted whole); ``s (s + 1) / 2`` when ``w >= s``."""
        s, w = seq_len, self.window
        if w >= s:
            return s * (s + 1) / 2
        if self.kind == "sliding":
            return s * w - w * (w - 1) / 2
        return s / w * w * (w + 1) / 2


@dataclass(frozen=True, kw_only=True)
class MlaSpec:
    """Multi-head latent attention dimensions (DeepSeek-V2/V3)."""

    q_lora_rank: int
    """Rank of the query down-projection (0: full-rank query projection)."""
    kv_lora_rank: int
    """Rank of the compressed key/value latent."""
    qk_nope_head_dim: int
    """Per-head query/key dim without rotary embedding."""
    qk_rope_head_dim: int
    """Per-head query/key dim carrying the decoupled rotary embedding."""
    v_head_dim: int
    """Per-head value dim."""

    def __post_init__(self) -> None:
        for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            _positive(getattr(self, name), f"mla.{name}")
        if self.q_lora_rank < 0:
            raise ConfigError(f"mla.q_lora_rank={self.q_lora_rank} must be >= 0")


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer; every size is a count, not bytes."""

    name: str
    """Display name."""
    num_layers: int
    """Transformer layers."""
    hidden_size: int
    """Model (residual stream) width."""
    num_heads: int
    """Query attention heads."""
    num_kv_heads: int
    """Key/value heads: ``num_heads`` for MHA, fewer for GQA, 1 for MQA."""
    head_dim: int
    """Per-head dimension of q, k and v."""
    ffn_hidden_size: int
    """Intermediate size of the dense MLP."""
    mlp: MlpKind
    """``plain`` (two matrices, GELU/ReLU) or ``gated`` (three matrices, SwiGLU/GeGLU)."""
    vocab_size: int
    """Vocabulary size (rows of the embedding)."""
    seq_len: int
    """Default training sequence length in tokens."""
    tied_embeddings: bool = False
    """Whether the output projection shares the input embedding's weights."""
    norm: NormKind = "rmsnorm"
    """Normalisation layer kind."""
    position: PositionKind = "rope"
    """Position encoding: ``learned`` adds ``seq_len x hidden`` parameters."""
    attention_bias: bool = False
    """Bias vectors on the q/k/v/o projections."""
    mlp_bias: bool = False
    """Bias vectors on the MLP matrices."""
    qk_norm: bool = False
    """Per-head RMSNorm on queries and keys (Qwen3)."""
    dropout: bool = False
    """Hidden and attention dropout active in training (Megatron GPT defaults p=0.1; Llama-era models none)."""
    moe: MoeSpec | None = None
    """Mixture-of-experts layout; ``None`` for a dense model."""
    mla: MlaSpec | None = None
    """Multi-head latent attention dims; ``None`` for standard attention."""
    local_attention: LocalAttention | None = None
    """Layers with sliding-window or chunked attention; ``None``: every layer attends to the whole sequence."""
    attention_sinks: bool = False
    """A learned sink logit per head and layer in the softmax's denominator (gpt-oss; Xiao et al. 2023,
    "Efficient Streaming Language Models with Attention Sinks")."""
    published_params: float = 0.0
    """Total parameter count as the source states it (0 when unknown); used by tests."""
    published_active_params: float = 0.0
    """Parameters active per token for MoE, as the source states it (0 when unknown)."""
    source: str = ""
    """Where the shape comes from (URL or paper/table)."""
    seq_len_basis: str = ""
    """Where ``seq_len`` comes from when the source does not state a training length outright, as a predicate ("is
    the config's training length original_max_position_embeddings", "is assumed, ..."), said wherever a job trains
    at it; empty: stated."""
    unmodelled: tuple[str, ...] = ()
    """Fields of the source that change the model but that the cost model does not model, each with its value and
    what is costed instead (said as warnings)."""
    note: str = ""
    """Caveats."""
    extra: dict[str, str] = field(default_factory=dict)
    """Free-form provenance details that no computation reads."""

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
                     "ffn_hidden_size", "vocab_size", "seq_len"):
            _positive(getattr(self, name), name)
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(f"num_kv_heads={self.num_kv_heads} must divide num_heads={self.num_heads}")
        if self.moe and self.moe.num_dense_layers > self.num_layers:
            raise ConfigError(
                f"moe.num_dense_layers={self.moe.num_dense_layers} must be <= num_layers={self.num_layers}")
        if self.local_attention and self.local_attention.num_layers > self.num_layers:
            raise ConfigError(f"local_attention.num_layers={self.local_attention.num_layers} must be <= "
                              f"num_layers={self.num_layers}")

    def seq_len_notes(self, seq_len: int) -> tuple[str, ...]:
        """What a job at ``seq_len`` assumed of its sequence length: where the model's own comes from, when the job
        takes it (``seq_len`` 0) and the source does not state it outright (:attr:`seq_len_basis`); else nothing."""
        if seq_len or not self.seq_len_basis:
            return ()
        return (f"sequence length {self.seq_len:,} {self.seq_len_basis} (--seq-len sets another)",)

    # --- shapes ---------------------------------------------------------------------------
    @cached_property
    def qk_head_dim(self) -> int:
        """Per-head dim of queries and keys as the attention core sees them."""
        return self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim if self.mla else self.head_dim

    @cached_property
    def v_head_dim(self) -> int:
        """Per-head dim of values as the attention core sees them."""
        return self.mla.v_head_dim if self.mla else self.head_dim

    @cached_property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts."""
        return self.moe_layers_between(0, self.num_layers)

    def moe_layers_between(self, start: int, stop: int) -> int:
        """MoE layers among layers ``start`` .. ``stop - 1`` (:attr:`MoeSpec.layer_step`)."""
        if not self.moe or stop <= start:
            return 0
        first = max(start, self.moe.num_dense_layers)
        step = self.moe.layer_step
        return max(0, stop // step - first // step) if stop > first else 0

    def is_moe_layer(self, layer: int) -> bool:
        """Whether layer ``layer`` (from 0) has a mixture-of-experts MLP."""
        return self.moe_layers_between(layer, layer + 1) == 1

    def attention_pairs_per_layer(self, seq_len: int) -> float:
        """Mean (query, key) pairs a causal head computes per layer over a ``seq_len`` sequence, local layers
        (:class:`LocalAttention`) included; full causal attention is ``s (s + 1) / 2``."""
        full = seq_len * (seq_len + 1) / 2
        local = self.local_attention
        if not local or not local.num_layers:
            return full
        n = local.num_layers
        return ((self.num_layers - n) * full + n * local.causal_pairs(seq_len)) / self.num_layers

    @cached_property
    def num_dense_layers(self) -> int:
        """Layers whose MLP is dense."""
        return self.num_layers - self.num_moe_layers

    @cached_property
    def norm_bias(self) -> bool:
        """LayerNorm carries a bias where the model uses biases at all (GPT-3, OPT, BLOOM); MPT-style no-bias models and RMSNorm do not."""
        return self.norm == "layernorm" and (self.attention_bias or self.mlp_bias)

    # --- parameter counts ----------------------------------------------------------------
    def norm_params(self) -> int:
        """Parameters of one norm layer over ``hidden_size``."""
        return self.hidden_size * (2 if self.norm_bias else 1)

    def attention_params(self) -> int:
        """Parameters of one attention block (projections, biases, qk-norm)."""
        return self._attention_params

    @cached_property
    def _attention_params(self) -> int:
        """:meth:`attention_params`, counted once per model (a frozen value; an estimate asks for it per stage)."""
        h, a = self.hidden_size, self.num_heads
        if self.mla:
            m = self.mla
            q_dim = a * (m.qk_nope_head_dim + m.qk_rope_head_dim)
            q = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * q_dim if m.q_lora_rank else h * q_dim
            kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
            kv += m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim)
            return q + kv + a * m.v_head_dim * h
        q_dim, kv_dim = a * self.head_dim, self.num_kv_heads * self.head_dim
        weights = h * (q_dim + 2 * kv_dim) + q_dim * h
        biases = (q_dim + 2 * kv_dim + h) if self.attention_bias else 0
        qk_norm = 2 * self.head_dim if self.qk_norm else 0
        sinks = a if self.attention_sinks else 0
        return weights + biases + qk_norm + sinks

    def mlp_params(self, ffn_hidden_size: int) -> int:
        """Parameters of one MLP (dense or one expert) of intermediate size ``ffn_hidden_size``."""
        h, f = self.hidden_size, ffn_hidden_size
        if self.mlp == "gated":
            return 3 * h * f + ((2 * f + h) if self.mlp_bias else 0)
        return 2 * h * f + ((f + h) if self.mlp_bias else 0)

    def moe_layer_mlp_params(self) -> int:
        """Parameters of one MoE block: router, routed experts and shared experts."""
        assert self.moe is not None
        m = self.moe
        shared = m.num_shared_experts * self.mlp_params(m.shared_expert_ffn_hidden_size) if m.num_shared_experts else 0
        return self.router_params() + m.num_experts * self.mlp_params(m.expert_ffn_hidden_size) + shared

    def router_params(self) -> int:
        """Parameters of one MoE router (its bias included)."""
        assert self.moe is not None
        return (self.hidden_size + (1 if self.moe.router_bias else 0)) * self.moe.num_experts

    def moe_layer_active_mlp_params(self) -> int:
        """Parameters of one MoE block that a single token touches."""
        assert self.moe is not None
        m = self.moe
        shared = m.num_shared_experts * self.mlp_params(m.shared_expert_ffn_hidden_size) if m.num_shared_experts else 0
        return self.router_params() + m.top_k * self.mlp_params(m.expert_ffn_hidden_size) + shared

    def layer_tensor_count(self, moe_layer: bool) -> int:
        """Parameter tensors of one layer as frameworks store them (fused q/k/v and gate/up matrices)."""
        norms = 2 * (2 if self.norm_bias else 1)
        if self.mla:
            attention = (3 if self.mla.q_lora_rank else 1) + 3 + 1  # q (down, norm, up) | q; kv down, norm, up; o
        else:
            attention = 2 + (2 if self.attention_bias else 0) + (2 if self.qk_norm else 0)
        mlp = 2 + (2 if self.mlp_bias else 0)
        if moe_layer and self.moe:
            mlp = 1 + self.moe.num_experts * mlp + (mlp if self.moe.num_shared_experts else 0)
        return norms + attention + mlp

    def layer_vector_sizes(self, moe_layer: bool) -> tuple[int, ...]:
        """Elements of each one-dimensional parameter tensor of one layer (norm weights and biases, linear biases,
        qk-norms), among the tensors :meth:`layer_tensor_count` counts; the rest are matrices."""
        h, f = self.hidden_size, self.ffn_hidden_size
        norms = (h,) * (4 if self.norm_bias else 2)
        if self.mla:
            attention = (self.mla.q_lora_rank,) * bool(self.mla.q_lora_rank) + (self.mla.kv_lora_rank,)
        else:
            q_dim, kv_dim = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
            attention = (q_dim + 2 * kv_dim, h) * self.attention_bias + (self.head_dim,) * (2 * self.qk_norm)

        def biases(width: int) -> tuple[int, ...]:
            return ((2 * width if self.mlp == "gated" else width), h) if self.mlp_bias else ()

        mlp = biases(f)
        if moe_layer and self.moe:
            m = self.moe
            mlp = biases(m.expert_ffn_hidden_size) * m.num_experts
            mlp += biases(m.shared_expert_ffn_hidden_size) if m.num_shared_experts else ()
        return norms + attention + mlp

    def embedding_params(self) -> int:
        """Input embedding (and learned positions)."""
        pos = self.seq_len * self.hidden_size if self.position == "learned" else 0
        return self.vocab_size * self.hidden_size + pos

    def output_params(self) -> int:
        """Final norm plus the untied output projection."""
        head = 0 if self.tied_embeddings else self.vocab_size * self.hidden_size
        return self.norm_params() + head

    def layer_params(self, moe_layer: bool) -> int:
        """Parameters of one transformer layer."""
        mlp = self.moe_layer_mlp_params() if moe_layer else self.mlp_params(self.ffn_hidden_size)
        return 2 * self.norm_params() + self.attention_params() + mlp

    def total_params(self) -> int:
        """All parameters."""
        return self._param_totals[0]

    def active_params(self) -> int:
        """Parameters touched per token (equals :meth:`total_params` for dense models)."""
        return self._param_totals[1]

    @cached_property
    def _param_totals(self) -> tuple[int, int]:
        """(all, active) parameters, counted once per model (a frozen value; every estimate asks for both)."""
        layers = self.num_dense_layers * self.layer_params(False)
        if self.moe:
            layers += self.num_moe_layers * self.layer_params(True)
        total = self.embedding_params() + layers + self.output_params()
        if not self.moe:
            return total, total
        dense = self.num_dense_layers * self.layer_params(False)
        moe = self.num_moe_layers * (2 * self.norm_params() + self.attention_params() + self.moe_layer_active_mlp_params())
        return total, self.embedding_params() + dense + moe + self.output_params()


MAX_SIZE = 2**31 - 1
"""Largest size or count a model may state (vocabularies, sequences and widths of real models are far below;
past it the cost model's integer columns would overflow)."""


def _positive(value: int, name: str) -> None:
    if not 0 < value <= MAX_SIZE:
        raise ConfigError(f"{name}={value} must be > 0 and <= {MAX_SIZE}")
