"""Megatron-LM ``pretrain_gpt.py`` command-line arguments for a Plan and its model.

Flag names are those of NVIDIA/Megatron-LM ``megatron/training/arguments.py``; the test
suite checks every exported flag against a copy of that parser's flag list
(``tests/data/megatron_lm_arguments.txt``, with the commit it was read from), because
Megatron-LM's training package is not installable from PyPI.
"""

from __future__ import annotations

from plait.export.artifact import Artifact, bash_array
from plait.job import Job
from plait.plan.plan import FULL_PRECISIONS, Plan
from plait.workload.model import ModelSpec


def _model_args(model: ModelSpec, seq: int) -> list[str]:
    args = ["--num-layers", str(model.num_layers), "--hidden-size", str(model.hidden_size),
            "--ffn-hidden-size", str(model.ffn_hidden_size), "--num-attention-heads", str(model.num_heads),
            "--kv-channels", str(model.head_dim),
            "--seq-length", str(seq), "--max-position-embeddings", str(max(seq, model.seq_len))]
    if model.num_kv_heads != model.num_heads:
        args += ["--group-query-attention", "--num-query-groups", str(model.num_kv_heads)]
    if model.mlp == "gated":
        args.append("--swiglu")
    args += ["--normalization", "RMSNorm" if model.norm == "rmsnorm" else "LayerNorm"]
    args += ["--position-embedding-type", {"rope": "rope", "learned": "learned_absolute", "alibi": "none"}[model.position]]
    if not model.tied_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if not (model.attention_bias or model.mlp_bias):
        args.append("--disable-bias-linear")
    if not model.dropout:
        args += ["--attention-dropout", "0.0", "--hidden-dropout", "0.0"]
    if model.moe:
        args += ["--num-experts", str(model.moe.num_experts), "--moe-router-topk", str(model.moe.top_k),
                 "--moe-ffn-hidden-size", str(model.moe.expert_ffn_hidden_size)]
    return args


def megatron_args(plan: Plan, model: ModelSpec) -> tuple[list[str], list[str]]:
    """(arguments, notes) for Megatron-LM."""
    notes: list[str] = []
    seq = plan.seq_len or model.seq_len
    args = _model_args(model, seq)
    args += ["--tensor-model-parallel-size", str(plan.tp), "--pipeline-model-parallel-size", str(plan.pp),
             "--context-parallel-size", str(plan.cp), "--micro-batch-size", str(plan.micro_batch),
             "--global-batch-size", str(plan.global_batch)]
    if plan.ep > 1:
        args += ["--expert-model-parallel-size", str(plan.ep)]
    if plan.sp and plan.tp > 1:
        args.append("--sequence-parallel")
    if plan.pp > 1 and plan.vpp > 1:
        args += ["--num-layers-per-virtual-pipeline-stage", str(-(-model.num_layers // (plan.pp * plan.vpp)))]
    if plan.pp > 1 and plan.schedule in ("gpipe", "zb-h1"):
        notes.append(f"schedule={plan.schedule}: Megatron-LM runs 1F1B (interleaved with virtual stages)")
    if plan.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
    elif plan.recompute == "full":
        layers = plan.recompute_layers if plan.recompute_layers >= 0 else -(-model.num_layers // plan.pp)
        args += ["--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", str(layers)]
    if plan.sharding in ("zero1", "zero2"):
        args += ["--use-distributed-optimizer", "--overlap-param-gather"]
        if plan.sharding == "zero2":
            notes.append("zero2: Megatron's distributed optimizer shards optimizer state and reduce-scatters "
                         "gradients (the gradient buffer itself stays whole)")
    elif plan.sharding == "zero3":
        args += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params"]
    if plan.overlap_grad_reduce and plan.dp > 1:
        args.append("--overlap-grad-reduce")
    if plan.precision in FULL_PRECISIONS:  # Megatron-LM trains in fp32 when neither --fp16 nor --bf16 is given
        notes.append(f"{plan.precision}: no --fp16/--bf16 (fp32 weights and activations)"
                     + ("; TF32 matmuls need torch.backends.cuda.matmul.allow_tf32 = True"
                        if plan.precision == "tf32" else ""))
    else:
        args.append("--fp16" if plan.precision == "fp16" else "--bf16")
    if plan.precision == "fp8":
        args += ["--fp8-format", "hybrid"]
    if plan.grad_reduce_dtype == "fp32":
        args.append("--accumulate-allreduce-grads-in-fp32")
    if plan.offload_optimizer:
        args += ["--optimizer-cpu-offload"]
    if plan.offload_params:
        notes.append("offload_params: Megatron-LM has no parameter offload to host")
    if plan.swap_activations and plan.swap_layers >= 0:  # the first swap_layers layers, as Transformer Engine takes
        # cpu_offloading_num_layers (plait.plan.plan.Plan.swap_layers); engines.toml refuses every layer
        args += ["--cpu-offloading-num-layers", str(plan.swap_layers)]
        notes.append(f"swap_activations: Megatron-Core's cpu_offloading (activations only, cpu_offloading_activations "
                     f"defaults to true) of the first {plan.swap_layers} layers")
    elif plan.swap_activations:  # TransformerConfig fields are flags; num_layers > 0 turns cpu_offloading on
        # (megatron/training/arguments.py L1950-1951 @d98e8a64); it must stay below num_layers (transformer_config.py
        # L1884-1889): the last layer's activations stay on the device, as plait's cost model keeps one layer
        args += ["--cpu-offloading-num-layers", str(model.num_layers - 1)]
        notes.append("swap_activations: Megatron-Core's cpu_offloading (activations only, "
                     "cpu_offloading_activations defaults to true) of all layers but the last")
    if plan.tp_comm_overlap:
        args.append("--tp-comm-overlap")
    return args, notes


def megatron_artifact(job: Job) -> Artifact:
    """A shell snippet with the arguments for ``job``."""
    plan = job.plan
    args, notes = megatron_args(plan, job.model)
    return bash_array("megatron.sh", "MEGATRON_ARGS", f"Megatron-LM arguments written by plait for: {plan.describe()}",
                      'torchrun ... pretrain_gpt.py "${MEGATRON_ARGS[@]}" <data, tokenizer, optimizer args>',
                      args, notes)
