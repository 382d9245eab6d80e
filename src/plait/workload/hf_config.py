"""Read a Hugging Face ``config.json`` into a ModelSpec, with no network and no transformers.

Key names follow the ``transformers`` configuration classes (LlamaConfig, Llama4TextConfig, MistralConfig,
MixtralConfig, Qwen2/Qwen3(Moe)Config, DeepseekV3Config, GptOssConfig, GPT2Config, OPTConfig,
BloomConfig, NemotronConfig) and xAI's Grok-1 config. Architecture families whose MLP has two matrices are listed
in ``_PLAIN_MLP``; every other family is taken as gated (SwiGLU), as in Llama.

What a config does not state is said, not hidden: the training sequence length and where it comes from
(``ModelSpec.seq_len_basis``: the config's own training length, else at most :data:`ASSUMED_SEQ_LEN`, never silently
the positional limit), and every field read but not modelled (``ModelSpec.unmodelled``: DeepSeek-V3's
multi-token-prediction module, Grok-1's extra norms, sliding windows of families read without them, logit
soft-capping, RoPE scaling, dropout, ...), which estimates carry as warnings.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from plait.errors import ConfigError, parsing, read_user_file
from plait.workload.model import LocalAttention, MlaSpec, ModelSpec, MoeSpec

_PLAIN_MLP = {"gpt2", "opt", "bloom", "gpt_neox", "gptj", "mpt", "falcon", "gpt_bigcode", "nemotron", "starcoder2"}
_LAYERNORM = {"gpt2", "opt", "bloom", "gpt_neox", "gptj", "mpt", "falcon", "gpt_bigcode", "nemotron", "starcoder2", "phi"}
_LEARNED_POS = {"gpt2", "opt", "gpt_bigcode"}
_ALIBI = {"bloom", "mpt"}
_QK_NORM = {"qwen3", "qwen3_moe", "olmo2", "gemma3"}
_LIMIT_KEYS = ("max_position_embeddings", "n_positions", "seq_length", "max_seq_len")
ASSUMED_SEQ_LEN = 8192
"""Training sequence length taken for a ``config.json`` that states no training length and allows longer: Llama 3's
pre-training length before its long-context stage (Dubey et al. 2024, "The Llama 3 Herd of Models", Sec. 3.4.1:
8K-token sequences), the longest of the published configs that state one (DeepSeek-V3 and gpt-oss: 4,096, their
``rope_scaling.original_max_position_embeddings``, tests/data/model_configs). A config's positional limit is the
longest sequence it serves after context extension, not what a training run is sized for (Phi-3-mini-128k: 131,072
positions, trained at 4,096)."""
_DROPOUT_KEYS = ("attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop", "dropout")


def _whole(value: Any, key: str) -> int:
    """A count from config.json: a whole number (JSON integer, or a float with no fraction), never a bool."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value != int(value):
        raise ConfigError(f"config.json {key}={value!r} must be a whole number")
    return int(value)


def _first(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    if default is None:
        raise ConfigError(f"config.json lacks {keys[0]!r} (also tried {', '.join(keys[1:]) or 'nothing else'})")
    return default


def _moe(cfg: dict[str, Any], kind: str) -> MoeSpec | None:
    experts = cfg.get("num_local_experts") or cfg.get("n_routed_experts") or cfg.get("num_experts")
    if not experts:
        return None
    shared = _whole(cfg.get("n_shared_experts") or 0, "n_shared_experts")
    expert_ffn = _whole(_first(cfg, "moe_intermediate_size", "intermediate_size"), "moe_intermediate_size")
    shared_ffn = _whole(cfg.get("shared_expert_intermediate_size") or (expert_ffn if shared else 0),
                        "shared_expert_intermediate_size")
    if cfg.get("shared_expert_intermediate_size") and not shared:
        shared = 1
    if kind.startswith("llama4"):  # Llama4TextMoe: one shared expert as wide as a routed one, in every MoE layer
        shared, shared_ffn = 1, expert_ffn
    if cfg.get("mlp_only_layers"):
        raise ConfigError(f"config.json mlp_only_layers={cfg['mlp_only_layers']} is not modelled (plait places dense "
                          "layers first and then every layer_step-th MoE)")
    freq = _whole(cfg.get("moe_layer_freq") or 1, "moe_layer_freq")
    if freq != 1:  # DeepSeek's rule is layer % freq == 0, not (layer + 1) % step == 0
        raise ConfigError(f"config.json moe_layer_freq={freq} is not modelled (1: every layer past the dense ones)")
    step = _whole(cfg.get("interleave_moe_layer_step") or cfg.get("decoder_sparse_step") or 1, "moe layer step")
    listed = cfg.get("moe_layers")
    if listed is not None and list(listed) != list(range(step - 1, _whole(cfg["num_hidden_layers"], "layers"), step)):
        raise ConfigError(f"config.json moe_layers={listed} is not every {step}-th layer (not modelled)")
    return MoeSpec(
        num_experts=_whole(experts, "num_local_experts"),
        top_k=_whole(_first(cfg, "num_experts_per_tok", "experts_per_token", "moe_top_k"), "num_experts_per_tok"),
        expert_ffn_hidden_size=expert_ffn,
        num_shared_experts=shared,
        shared_expert_ffn_hidden_size=shared_ffn,
        num_dense_layers=_whole(cfg.get("first_k_dense_replace") or 0, "first_k_dense_replace"),
        layer_step=step,
        router_bias=kind == "gpt_oss",  # GptOssTopKRouter: a bias per expert
    )


def _local_attention(cfg: dict[str, Any], kind: str, layers: int) -> LocalAttention | None:
    """Sliding-window or chunked layers, as ``transformers`` selects them: ``layer_types`` where the config lists
    them; Qwen2/3's ``use_sliding_window`` from ``max_window_layers`` on; Mistral's ``sliding_window`` on every
    layer; Llama 4's ``attention_chunk_size`` on its rope layers (``no_rope_layers``, by default all but every
    fourth: ``no_rope_layer_interval`` 4)."""
    types = cfg.get("layer_types")
    window = cfg.get("sliding_window")
    if isinstance(types, list) and types:
        if len(types) != layers:
            raise ConfigError(f"config.json layer_types lists {len(types)} layers, num_hidden_layers={layers}")
        local = sum(t in ("sliding_attention", "chunked_attention") for t in types)
        chunked = any(t == "chunked_attention" for t in types)
        size = cfg.get("attention_chunk_size") if chunked else window
        return LocalAttention(kind="chunked" if chunked else "sliding", window=_whole(size, "sliding_window"),
                              num_layers=local) if local else None
    if kind.startswith("llama4") and cfg.get("attention_chunk_size"):
        rope = cfg.get("no_rope_layers")
        interval = _whole(cfg.get("no_rope_layer_interval") or 4, "no_rope_layer_interval")
        local = sum(bool(x) for x in rope) if isinstance(rope, list) and rope else layers - layers // interval
        return LocalAttention(kind="chunked", window=_whole(cfg["attention_chunk_size"], "attention_chunk_size"),
                              num_layers=local)
    if window and "use_sliding_window" in cfg:
        if not cfg["use_sliding_window"]:
            return None
        start = _whole(cfg.get("max_window_layers") or 0, "max_window_layers")
        return LocalAttention(kind="sliding", window=_whole(window, "sliding_window"), num_layers=max(0, layers - start))
    if window and kind in ("mistral", "mixtral"):
        return LocalAttention(kind="sliding", window=_whole(window, "sliding_window"), num_layers=layers)
    return None


def _mla(cfg: dict[str, Any]) -> MlaSpec | None:
    if not cfg.get("kv_lora_rank"):
        return None
    return MlaSpec(
        q_lora_rank=_whole(cfg.get("q_lora_rank") or 0, "q_lora_rank"),
        kv_lora_rank=_whole(_first(cfg, "kv_lora_rank"), "kv_lora_rank"),
        qk_nope_head_dim=_whole(_first(cfg, "qk_nope_head_dim"), "qk_nope_head_dim"),
        qk_rope_head_dim=_whole(_first(cfg, "qk_rope_head_dim"), "qk_rope_head_dim"),
        v_head_dim=_whole(_first(cfg, "v_head_dim"), "v_head_dim"),
    )


def _rope(cfg: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The RoPE scaling table and its key (``rope_scaling``; ``rope_parameters`` in transformers 5)."""
    key = "rope_parameters" if cfg.get("rope_parameters") is not None else "rope_scaling"
    rope = cfg.get(key) or {}
    if not isinstance(rope, dict):
        raise ConfigError(f"config.json {key}={rope!r} must be an object")
    return key, rope


def _seq_len(cfg: dict[str, Any], kind: str) -> tuple[int, str]:
    """The training sequence length and where it comes from: the config's own training length where it gives one
    (RoPE scaling's or Phi-3's ``original_max_position_embeddings``), a learned position table's length, the
    positional limit up to :data:`ASSUMED_SEQ_LEN`, else :data:`ASSUMED_SEQ_LEN`."""
    key, rope = _rope(cfg)
    limit_key = next((k for k in _LIMIT_KEYS if cfg.get(k) is not None), None)
    limit = _whole(cfg[limit_key], limit_key) if limit_key else None
    for where, value in ((f"{key}.original_max_position_embeddings", rope.get("original_max_position_embeddings")),
                         ("original_max_position_embeddings", cfg.get("original_max_position_embeddings"))):
        if value:
            length = _whole(value, where)
            longer = f"; {limit_key}={limit:,} is the extended limit" if limit and limit > length else ""
            return length, f"is the config's training length {where}{longer}"
    if limit is not None and kind in _LEARNED_POS:
        return limit, f"is the learned position table's length {limit_key}"
    if limit is not None and limit <= ASSUMED_SEQ_LEN:
        return limit, f"is the config's positional limit {limit_key} (it states no training length)"
    beyond = f" and {limit_key}={limit:,} is only the longest sequence it serves" if limit else ""
    return ASSUMED_SEQ_LEN, f"is assumed, a common pretraining length: the config states no training length{beyond}"


def _unmodelled(cfg: dict[str, Any], kind: str, local: LocalAttention | None) -> tuple[str, ...]:
    """Fields that change the model but not plait's cost of it, each with what is costed instead."""
    notes = []
    window = cfg.get("sliding_window")
    if window and local is None and cfg.get("use_sliding_window") is not False:
        notes.append(f"sliding_window={window} is not modelled for model_type {kind!r} (plait reads windows from "
                     "layer_types, use_sliding_window, or Mistral/Mixtral): every layer costed with full attention")
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        if cfg.get(key):
            notes.append(f"{key}={cfg[key]} is not modelled: costed without the tanh soft-capping")
    key, rope = _rope(cfg)
    scaling = rope.get("rope_type") or rope.get("type")
    if scaling not in (None, "default"):
        notes.append(f"{key} type {scaling!r} is not modelled: rotary embeddings costed unscaled (the scaling "
                     "changes their frequencies, not the FLOPs or bytes counted)")
    if cfg.get("partial_rotary_factor") not in (None, 1, 1.0):
        notes.append(f"partial_rotary_factor={cfg['partial_rotary_factor']} is not modelled: rotary embeddings "
                     "costed on the whole head dimension")
    if cfg.get("num_nextn_predict_layers"):
        notes.append(f"num_nextn_predict_layers={cfg['num_nextn_predict_layers']} (multi-token prediction) is not "
                     "modelled: costed without its extra layers")
    if kind == "grok-1":
        notes.append("Grok-1's extra post-attention and post-MoE norms are not modelled: left out of the count")
    if cfg.get("topk_group") and cfg.get("n_group"):
        notes.append(f"topk_group={cfg['topk_group']} of n_group={cfg['n_group']} (group-limited routing) is not "
                     "modelled: tokens costed as routed to experts on any rank")
    for key in _DROPOUT_KEYS:
        value = cfg.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            notes.append(f"{key}={value} is not modelled: costed without dropout masks")
    if cfg.get("quantization_config"):
        notes.append("quantization_config is not modelled: weights costed in the plan's precision")
    return tuple(notes)


def model_from_hf_dict(cfg: dict[str, Any], name: str) -> ModelSpec:
    """Translate a parsed ``config.json``."""
    kind = cfg.get("model_type", "llama")
    if not isinstance(kind, str):
        raise ConfigError(f"config.json model_type={kind!r} must be a string")
    hidden = _whole(_first(cfg, "hidden_size", "n_embd", "d_model"), "hidden_size")
    heads = _whole(_first(cfg, "num_attention_heads", "n_head", "num_heads"), "num_attention_heads")
    if heads <= 0:
        raise ConfigError(f"config.json num_attention_heads={heads} must be > 0")
    seq, seq_basis = _seq_len(cfg, kind)
    ffn = _first(cfg, "intermediate_size_mlp", "intermediate_size", "ffn_hidden_size", "n_inner", "ffn_dim",
                 default=4 * hidden)  # Llama 4: intermediate_size_mlp is the dense layers', intermediate_size an expert's
    moe = _moe(cfg, kind)
    if moe and kind == "mixtral":
        ffn = moe.expert_ffn_hidden_size
    biased = kind in {"gpt2", "opt", "bloom", "gpt_neox", "gptj", "gpt_bigcode", "starcoder2"}
    layers = _whole(_first(cfg, "num_hidden_layers", "n_layer", "num_layers"), "num_hidden_layers")
    local = _local_attention(cfg, kind, layers)
    return ModelSpec(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=_whole(_first(cfg, "num_key_value_heads", "multi_query_group_num", default=heads),
                            "num_key_value_heads"),
        head_dim=_whole(cfg.get("head_dim") or hidden // heads, "head_dim"),
        ffn_hidden_size=_whole(ffn, "intermediate_size"),
        mlp="plain" if kind in _PLAIN_MLP else "gated",
        vocab_size=_whole(_first(cfg, "vocab_size", "padded_vocab_size"), "vocab_size"),
        seq_len=seq,
        seq_len_basis=seq_basis,
        unmodelled=_unmodelled(cfg, kind, local),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", kind in {"gpt2", "opt", "bloom", "mpt"})),
        norm="layernorm" if kind in _LAYERNORM else "rmsnorm",
        position="learned" if kind in _LEARNED_POS else ("alibi" if kind in _ALIBI else "rope"),
        attention_bias=bool(cfg.get("attention_bias", cfg.get("qkv_bias", biased))),
        mlp_bias=bool(cfg.get("mlp_bias", biased or kind == "gpt_oss")),  # GptOssExperts: gate_up and down biases
        qk_norm=kind in _QK_NORM or bool(cfg.get("use_qk_norm")),
        moe=moe,
        mla=_mla(cfg),
        local_attention=local,
        attention_sinks=kind == "gpt_oss",  # GptOssAttention.sinks: one logit per head
        source=f"config.json ({kind})",
    )


def load_hf_config(path: Path) -> ModelSpec:
    """Read ``path`` (a Hugging Face ``config.json``)."""
    text = read_user_file(path, "model config")
    try:
        with parsing(path, "model config"):
            cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"model config {str(path)!r} is not valid JSON: {exc.msg} at line {exc.lineno}") from exc
    if not isinstance(cfg, dict):
        raise ConfigError(f"model config {str(path)!r} must hold a JSON object")
    name = path.parent.name if path.name == "config.json" else path.stem
    return model_from_hf_dict(cfg, name or path.stem)
