"""A DeepSpeed JSON configuration for a Plan.

Keys follow DeepSpeed's own config parser (``deepspeed/runtime/config.py``,
``deepspeed/runtime/zero/config.py``); the test suite checks them against a copy of
those schemas (``tests/data/deepspeed_config_schema.json``). DeepSpeed's batch rule
``train_batch_size = micro_batch x gradient_accumulation_steps x data-parallel size``
holds by construction. Tensor, pipeline and context parallelism are set in model code
(Megatron-DeepSpeed, ``PipelineModule``), not in this file; the notes say so.
"""

from __future__ import annotations

import json

from plait.export.artifact import Artifact
from plait.plan.plan import Plan

STAGE = {"none": 0, "zero1": 1, "zero2": 2, "zero3": 3}


def deepspeed_config(plan: Plan) -> tuple[dict[str, object], list[str]]:
    """(config, notes)."""
    notes: list[str] = []
    zero: dict[str, object] = {"stage": STAGE[plan.sharding], "overlap_comm": plan.overlap_grad_reduce,
                               "contiguous_gradients": True}
    if plan.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if plan.offload_params:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    config: dict[str, object] = {
        "train_batch_size": plan.global_batch,
        "train_micro_batch_size_per_gpu": plan.micro_batch,
        "gradient_accumulation_steps": plan.global_batch // (plan.micro_batch * plan.dp),
        "gradient_clipping": 1.0,
        "zero_optimization": zero,
        "bf16": {"enabled": plan.precision in ("bf16", "fp8")},
        "fp16": {"enabled": plan.precision == "fp16"},
    }
    if plan.precision == "fp8":
        notes.append("fp8: DeepSpeed runs fp8 GEMMs through Transformer Engine modules in the model code")
    if plan.model_parallel > 1 or plan.ep > 1:
        notes.append(f"tp={plan.tp}, pp={plan.pp}, cp={plan.cp}, ep={plan.ep}: set in model code "
                     "(Megatron-DeepSpeed arguments or PipelineModule); DeepSpeed's world size for this file is dp="
                     f"{plan.dp}")
    if plan.dp_replicate > 1 and plan.sharding == "zero3":
        config["zero_optimization"]["zero_hpz_partition_size"] = plan.dp_shard  # type: ignore[index]
        notes.append(f"HSDP: ZeRO++ hierarchical partitioning over groups of {plan.dp_shard}")
    if plan.recompute != "none":
        notes.append(f"recompute={plan.recompute}: enable activation checkpointing in model code "
                     "(deepspeed.checkpointing or the framework's flag)")
    return config, notes


def deepspeed_artifact(plan: Plan) -> Artifact:
    """The JSON file."""
    config, notes = deepspeed_config(plan)
    return Artifact("deepspeed.json", json.dumps(config, indent=2) + "\n", notes)
