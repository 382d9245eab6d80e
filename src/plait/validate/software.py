"""What the software of a measured run did, where its source documents it.

A run's step time depends on its framework as well as its layout. Where a source
documents behaviour the CSV has no column for, it is recorded here with its citation
(details: docs/research/framework_facts.md); every other run gets the modern defaults
(flash attention, no dropout, overlapped gradient reduction, ring context parallelism).
These are categorical facts about the code that ran, never numbers tuned to the
measured times; knobs a run leaves open are still filled by the one rule of
:mod:`plait.validate.translate`.

Documented but deliberately not applied: NeMo 24.07 and Megatron-Bridge 25.11 enable TP
communication overlap (userbuffers) for tp > 1. plait's ``tp_comm_overlap`` hides TP
traffic behind the layer's GEMMs completely, while published async-TP measurements
(torchtitan benchmarks/asyncTP_llama3_h100_2025-06: +9-10% tokens/s for Llama 3 8B/70B
at tp 8, where TP traffic is ~60% of GEMM time) show that decomposed overlap hides only a
small part; until the interference is modelled, validation keeps TP traffic exposed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from plait.cost.framework import Framework
from plait.validate.runs import RunRow


@dataclass(frozen=True, kw_only=True)
class Software:
    """Framework behaviour of one run."""

    framework: Framework = field(default_factory=Framework)
    """Implementation choices the cost model distinguishes."""
    dropout: bool = False
    """Hidden and attention dropout active."""
    overlap_grad_reduce: bool = True
    """Data-parallel gradient reduction overlapped with the backward pass."""
    sequence_parallel: bool | None = None
    """Sequence parallelism fixed by the framework (``None``: unknown, filled by the knob rule)."""
    tp_comm_overlap: bool = False
    """TP collectives overlapped with GEMMs (Transformer Engine userbuffers)."""
    grad_reduce_dtype: str | None = None
    """Gradient-reduction dtype the framework uses (``None``: unknown, filled by the knob rule)."""
    selective_full_every: int = 0
    """What the run calls selective recomputation is full recomputation of every n-th layer (0: Megatron's
    selective recomputation of the attention core)."""
    why: str = "default: current frameworks (FlashAttention-2 or later, no dropout, overlapped gradient reduction)"
    """Where the facts come from."""


MEGATRON_2021 = Software(
    framework=Framework(attention_kernel="unfused"),
    dropout=True,
    overlap_grad_reduce=False,
    why=("Megatron-LM as of 2021-22 predates FlashAttention (Dao et al., arXiv 2205.14135, May 2022): the attention "
         "core is batched GEMMs plus a fused scale-mask-softmax that stores the score matrix (Korthikanti et al. "
         "2022, Sec. 4.1 counts these 5as^2b bytes); GPT runs use dropout 0.1 (Megatron-LM defaults); the "
         "data-parallel all-reduce runs after the pipeline flush (Narayanan et al. 2021, Sec. 2.2; Korthikanti et "
         "al. 2022, Sec. 6.3: 'not overlapped')."),
)

NARAYANAN_PTDP = Software(
    framework=MEGATRON_2021.framework, dropout=True, overlap_grad_reduce=False, sequence_parallel=False,
    why=MEGATRON_2021.why + " Sequence parallelism was introduced later (Korthikanti et al. 2022, Sec. 4.2.2).",
)

DEEPSPEED_ZERO3_2021 = Software(
    framework=Framework(attention_kernel="unfused", shard_unit="module", shard_prefetch=False),
    dropout=True,
    overlap_grad_reduce=False,
    why=("Narayanan et al. 2021, Table 2 compares against DeepSpeed ZeRO-3 of 2021, which fetched parameters from "
         "per-sub-module hooks with one NCCL all_gather per parameter tensor and a cuda synchronize per fetch "
         "(DeepSpeed PR #1188; stage3.py of that era), re-fetching for activation recomputation."),
)

TORCHTITAN = Software(
    framework=Framework(cp_kv_exchange="allgather", kv_repeat=True),
    grad_reduce_dtype="fp32",
    why=("torchtitan's context parallelism uses PyTorch context_parallel with rotate_method 'allgather' by default "
         "(torchtitan config_manager.py; torch/distributed/tensor/experimental/_attention.py); FSDP2 reduces "
         "gradients in fp32 (config_manager.py mixed_precision_reduce default 'float32'); its Llama Attention "
         "copies the grouped K/V heads out to every query head with repeat_kv before scaled_dot_product_attention "
         "(torchtitan/models/llama/model.py)."),
)

TORCHTITAN_SELECTIVE_WHY = (
    " Its 'selective' activation checkpointing is not Megatron's: 'selective layer' checkpoints every 2nd "
    "TransformerBlock (selective_ac_option '2' in the 64-A100 preset configs), and 'selective op' saves every "
    "other matmul output and recomputes the rest of the block's forward (parallelize_llama.py _save_list policy); "
    "both recompute about half of the layers' forward, costed here as full recomputation of every 2nd layer.")


TORCHTITAN_A100_DOCS = "torchtitan docs/performance.md (older version)"
"""The 64-A100 table of torchtitan's first performance page, measured with its 64-A100 preset configs."""

TORCHTITAN_EAGER_WHY = (
    " The 64-A100 preset configs of that table (train_configs/llama3_8b.toml, llama3_70b.toml, llama2_70b.toml @"
    "0011fb90/08e53794, each headed 'a preset for 64 A100 GPUs') set compile = false and norm_type = 'rmsnorm': "
    "eager PyTorch running torchtitan's Python RMSNorm, complex-number rotary embedding, silu-times-mul SwiGLU and "
    "repeat_kv copies (torchtitan/models/norms.py, models/llama/model.py).")


def torchtitan(recompute_raw: str | None, raw_source: str | None = None) -> Software:
    """torchtitan's documented behaviour: its selective checkpointing where the row used it, and eager
    pointwise ops for the rows of the 64-A100 table, whose preset configs turn ``torch.compile`` off."""
    software = TORCHTITAN
    if recompute_raw in ("selective layer", "selective op"):
        software = replace(software, selective_full_every=2, why=software.why + TORCHTITAN_SELECTIVE_WHY)
    if raw_source == TORCHTITAN_A100_DOCS:
        software = replace(software, framework=replace(software.framework, pointwise="eager"),
                           why=software.why + TORCHTITAN_EAGER_WHY)
    return software


COMPOSER_FSDP1_WHY = (
    "llm-foundry's 2023 benchmarks ran Composer's FSDP1 wrapper with its defaults (docs/research/framework_facts.md, "
    "section 1): backward_prefetch BACKWARD_POST, forward_prefetch False; mixed precision DEFAULT reduces gradients "
    "in fp32 and PURE in bf16 (Composer mosaic_fsdp_utils/dist_strategy of 2023). Attention was llm-foundry's "
    "Triton FlashAttention: submit_benchmarks.py of the tables (@431051c8, @a7c75677) defaults --attn_impl to "
    "'triton' and no sweep overrides it; MPT's attention.py calls it a peer of flash-attn 1.x ('attn_impl: triton "
    "can be faster than attn_impl: flash'), and FlashAttention-2 reached MPT only in v0.4.0 (PR #672, Oct 2023), "
    "so its rate is costed as a first-generation flash kernel.")


def composer_fsdp1(mixed_precision: str | None) -> Software:
    """llm-foundry/Composer FSDP1 as its benchmark runs used it, for the row's mixed-precision mode."""
    return Software(framework=Framework(shard_backward_prefetch="post", attention_kernel="flash1"),
                    grad_reduce_dtype="bf16" if mixed_precision == "PURE" else "fp32",
                    why=COMPOSER_FSDP1_WHY + f" This row: mixed precision {mixed_precision or 'DEFAULT (not stated)'}.")


def software_for(row: RunRow) -> Software:
    """The documented software facts of a run (modern defaults when none are recorded)."""
    if row.source == "narayanan_sc21":
        return DEEPSPEED_ZERO3_2021 if row.sharding == "zero3" else NARAYANAN_PTDP
    if row.source == "korthikanti_2022":
        return MEGATRON_2021
    if row.source == "torchtitan":
        return torchtitan(row.recompute_raw, row.raw_source)
    if row.source == "llmfoundry":
        return composer_fsdp1(row.fsdp_mixed_precision)
    return Software()
