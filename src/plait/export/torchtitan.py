"""torchtitan 0.3.0 launch arguments for a Plan.

torchtitan 0.3.0 builds its job configuration from a Python ``config_registry`` function
chosen with ``--module``/``--config`` and overridden by ``--<section>.<field>`` flags
parsed by tyro (``torchtitan/config/manager.py``, ``torchtitan/config/configs.py``);
activation checkpointing is a subcommand (``activation-checkpoint:full`` ...). The
export is that argument list, to append to ``torchrun ... -m torchtitan.train``.
"""

from __future__ import annotations

from plait.errors import ConfigError
from plait.export.artifact import Artifact, bash_array
from plait.job import Job
from plait.plan.plan import FULL_PRECISIONS, Plan
from plait.workload.model import ModelSpec

# plait catalog slug -> (torchtitan module, config_registry function) in torchtitan 0.3.0
CONFIGS = {
    "llama3-8b": ("llama3", "llama3_8b"), "llama3.1-8b": ("llama3", "llama3_8b"),
    "llama3-70b": ("llama3", "llama3_70b"), "llama3.1-70b": ("llama3", "llama3_70b"),
    "llama3.1-405b": ("llama3", "llama3_405b"),
    "qwen3-32b": ("qwen3", "qwen3_32b"), "qwen3-30b-a3b": ("qwen3", "qwen3_30b_a3b"),
    "deepseek-v3": ("deepseek_v3", "deepseek_v3_671b"),
}
SCHEDULES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B", "zb-h1": "InterleavedZeroBubble"}
AC = {"none": "activation-checkpoint:none", "selective": "activation-checkpoint:selective",
      "full": "activation-checkpoint:full"}


def torchtitan_args(plan: Plan, model_slug: str, model: ModelSpec) -> tuple[list[str], list[str]]:
    """(arguments, notes) for ``python -m torchtitan.train``."""
    if model_slug not in CONFIGS:
        raise ConfigError(f"torchtitan 0.3.0 has no config for model {model_slug!r} "
                          f"(known: {', '.join(sorted(CONFIGS))})")
    module, config = CONFIGS[model_slug]
    notes: list[str] = []
    local_batch = plan.global_batch // plan.dp
    args = ["--module", module, "--config", config,
            "--training.seq-len", str(plan.seq_len or model.seq_len),
            "--training.global-batch-size", str(plan.global_batch),
            "--training.local-batch-size", str(plan.micro_batch if plan.pp == 1 else local_batch),
            "--parallelism.data-parallel-replicate-degree", str(plan.dp_replicate),
            "--parallelism.data-parallel-shard-degree", str(plan.dp_shard),
            "--parallelism.tensor-parallel-degree", str(plan.tp),
            "--parallelism.context-parallel-degree", str(plan.cp),
            "--parallelism.expert-parallel-degree", str(plan.ep),
            "--parallelism.pipeline-parallel-degree", str(plan.pp)]
    args.append("--parallelism.enable-sequence-parallel" if plan.sp else "--parallelism.no-enable-sequence-parallel")
    if plan.pp > 1:
        args.append("--training.disable-cuda-graphs")  # torchtitan 0.3.0 refuses CUDA graphs with pipelining
        args += ["--parallelism.pipeline-parallel-schedule", SCHEDULES[plan.schedule],
                 "--parallelism.pipeline-parallel-microbatch-size", str(plan.micro_batch)]
        if plan.vpp > 1:
            args += ["--parallelism.pipeline-parallel-layers-per-stage",
                     str(-(-model.num_layers // (plan.pp * plan.vpp)))]
        if plan.schedule == "zb-h1":
            notes.append("zb-h1 is exported as PyTorch's InterleavedZeroBubble schedule (the closest in torch)")
    if plan.sharding == "zero2" or plan.sharding == "zero1":
        args += ["--parallelism.fsdp-reshard-after-forward", "never"]
        notes.append(f"{plan.sharding}: FSDP2 without resharding after forward (it also shards gradients; "
                     "torchtitan has no optimizer-only sharding)")
    elif plan.sharding == "zero3":
        args += ["--parallelism.fsdp-reshard-after-forward", "default"]
    if plan.offload_optimizer or plan.offload_params:
        args.append("--training.enable-cpu-offload")
        notes.append("torchtitan offloads parameters, gradients and optimizer state together (FSDP2 CPUOffloadPolicy)")
    if plan.recompute == "full" and plan.recompute_layers >= 0:  # plait's engine catalog refuses it for torchtitan
        notes.append(f"recompute_layers={plan.recompute_layers}: torchtitan 0.3.0 checkpoints every block (FullAC); "
                     "it has no policy for some blocks only")
    if plan.precision in FULL_PRECISIONS:  # torchtitan's FSDP2 mixed-precision policy, kept in fp32
        args += ["--training.mixed-precision-param", "float32"]
        if plan.precision == "tf32":
            notes.append("tf32: TF32 matmuls need torch.backends.cuda.matmul.allow_tf32 = True")
    if plan.precision == "fp16":
        notes.append("fp16: torchtitan trains with bf16 mixed precision (training.mixed_precision_param has no fp16)")
    if plan.precision == "fp8":
        notes.append("fp8: enable a Float8/MXFP8 converter (a config_registry variant such as "
                     f"{config}_mxfp8 where torchtitan ships one, or --override.imports)")
    if plan.tp_comm_overlap:
        args.append("--compile.enable-async-tensor-parallel")
        args.append("--compile.enable")
    args.append(AC[plan.recompute])
    return args, notes


def torchtitan_artifact(job: Job, model_slug: str) -> Artifact:
    """A shell snippet with the arguments for ``job`` (its model the catalog's ``model_slug``), one per line."""
    plan = job.plan
    args, notes = torchtitan_args(plan, model_slug, job.model)
    return bash_array("torchtitan.sh", "TORCHTITAN_ARGS",
                      f"torchtitan 0.3.0 arguments written by plait for: {plan.describe()}",
                      'torchrun --nproc-per-node=<gpus per node> ... -m torchtitan.train "${TORCHTITAN_ARGS[@]}"',
                      args, notes)
