"""Read a Hugging Face ``config.json`` into a ModelSpec, with no network and no transformers.

Key names follow the ``transformers`` configuration classes (LlamaConfig, Llama4TextConfig, MistralConfig,
MixtralConfig, Qwen2/Qwen3(Moe)Config, DeepseekV3Config, GptOssConfig, GPT2Config, OPTConfig,
BloomConfig, NemotronConfig) and xAI's Grok-1 config. Not modelled, and left out of the count: DeepSeek-V3's
multi-token-prediction module (``num_nextn_predict_layers``), Grok-1's extra post-attention and post-MoE norms. Architecture families whose MLP has two matrices are
listed in ``_PLAIN_MLP``; every other family is taken as gated (SwiGLU), as in Llama.
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


def model_from_hf_dict(cfg: dict[str, Any], name: str) -> ModelSpec:
    """Translate a parsed ``config.json``."""
    kind = cfg.get("model_type", "llama")
    if not isinstance(kind, str):
        raise ConfigError(f"config.json model_type={kind!r} must be a string")
    hidden = _whole(_first(cfg, "hidden_size", "n_embd", "d_model"), "hidden_size")
    heads = _whole(_first(cfg, "num_attention_heads", "n_head", "num_heads"), "num_attention_heads")
    if heads <= 0:
        raise ConfigError(f"config.json num_attention_heads={heads} must be > 0")
    rope = cfg.get("rope_scaling") or {}
    if not isinstance(rope, dict):
        raise ConfigError(f"config.json rope_scaling={rope!r} must be an object")
    seq = rope.get("original_max_position_embeddings") or _first(
        cfg, "max_position_embeddings", "n_positions", "seq_length", "max_seq_len", default=2048)
    ffn = _first(cfg, "intermediate_size_mlp", "intermediate_size", "ffn_hidden_size", "n_inner", "ffn_dim",
                 default=4 * hidden)  # Llama 4: intermediate_size_mlp is the dense layers', intermediate_size an expert's
    moe = _moe(cfg, kind)
    if moe and kind == "mixtral":
        ffn = moe.expert_ffn_hidden_size
    biased = kind in {"gpt2", "opt", "bloom", "gpt_neox", "gptj", "gpt_bigcode", "starcoder2"}
    layers = _whole(_first(cfg, "num_hidden_layers", "n_layer", "num_layers"), "num_hidden_layers")
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
        seq_len=_whole(seq, "max_position_embeddings"),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", kind in {"gpt2", "opt", "bloom", "mpt"})),
        norm="layernorm" if kind in _LAYERNORM else "rmsnorm",
        position="learned" if kind in _LEARNED_POS else ("alibi" if kind in _ALIBI else "rope"),
        attention_bias=bool(cfg.get("attention_bias", cfg.get("qkv_bias", biased))),
        mlp_bias=bool(cfg.get("mlp_bias", biased or kind == "gpt_oss")),  # GptOssExperts: gate_up and down biases
        qk_norm=kind in _QK_NORM or bool(cfg.get("use_qk_norm")),
        moe=moe,
        mla=_mla(cfg),
        local_attention=_local_attention(cfg, kind, layers),
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
