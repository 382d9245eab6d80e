"""Apply a plan to a model (part) with torch.distributed's own wrappers, in torchtitan's order:
tensor/sequence parallelism (DTensor ``parallelize_module``), activation checkpointing, then
data parallelism (FSDP2 ``fully_shard`` for ZeRO-2/3 and HSDP, DDP for plain replicas and,
with ``ZeroRedundancyOptimizer``, ZeRO-1).

The TP plan is Megatron's (Shoeybi et al. 2019): q/k/v and MLP-up column-wise, output and
MLP-down row-wise; with sequence parallelism the norms run on sequence shards and the
row-wise outputs reduce-scatter over the sequence (Korthikanti et al. 2022).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from plait.plan.plan import Plan
from plait.run.mesh import Mesh
from plait.run.model import Transformer


def apply_tp(model: Transformer, mesh: Mesh, plan: Plan) -> None:
    """Megatron-style tensor parallelism (with sequence parallelism when ``plan.sp``)."""
    tp_mesh = mesh.sub("tp")
    seq = Shard(1) if plan.sp else Replicate()
    top: dict[str, object] = {}
    if model.tok_embeddings is not None:
        top["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=seq)
    if model.norm is not None:
        if plan.sp:
            top["norm"] = SequenceParallel()
        top["output"] = ColwiseParallel(input_layouts=seq, output_layouts=Replicate(), use_local_output=True)
    if top:
        parallelize_module(model, tp_mesh, top)  # type: ignore[arg-type]
    for block in model.layers.values():
        layer_plan: dict[str, object] = {
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=seq),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w2": RowwiseParallel(output_layouts=seq),
        }
        if block.feed_forward.w3 is not None:
            layer_plan["feed_forward.w3"] = ColwiseParallel()
        if plan.sp:
            layer_plan.update({
                "attention_norm": SequenceParallel(), "ffn_norm": SequenceParallel(),
                "attention": PrepareModuleInput(input_layouts=(Shard(1), None, None),
                                                desired_input_layouts=(Replicate(), None, None)),
                "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            })
        parallelize_module(block, tp_mesh, layer_plan)  # type: ignore[arg-type]
    if model.pos_embeddings is not None and plan.sp:
        raise NotImplementedError("learned positions with sequence parallelism")  # guarded by check_runnable users


def apply_recompute(model: Transformer, plan: Plan) -> None:
    """Full: checkpoint whole layers (the first ``recompute_layers`` of the part, or all);
    selective: recompute only the attention core (Korthikanti et al. 2022, Sec. 5)."""
    if plan.recompute == "selective":
        for block in model.layers.values():
            block.attention.recompute_core = True
    elif plan.recompute == "full":
        names = list(model.layers)
        count = len(names) if plan.recompute_layers < 0 else min(plan.recompute_layers, len(names))
        for name in names[:count]:
            model.layers[name] = checkpoint_wrapper(model.layers[name], preserve_rng_state=False)


def _mixed_precision(plan: Plan) -> MixedPrecisionPolicy:
    if plan.precision in ("bf16", "fp8"):
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32
                                    if plan.grad_reduce_dtype == "fp32" else torch.bfloat16)
    if plan.precision == "fp16":
        return MixedPrecisionPolicy(param_dtype=torch.float16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def apply_fsdp(model: Transformer, mesh: Mesh, plan: Plan, full_precision: bool) -> None:
    """FSDP2 per layer and at the root: ZeRO-3 reshards after forward, ZeRO-2 keeps parameters gathered."""
    dp_mesh = mesh.sub("dp_replicate", "dp_shard") if plan.dp_replicate > 1 else mesh.sub("dp_shard")
    kwargs = {
        "mesh": dp_mesh,
        "reshard_after_forward": plan.sharding == "zero3",
        "mp_policy": MixedPrecisionPolicy() if full_precision else _mixed_precision(plan),
    }
    if plan.offload_optimizer or plan.offload_params:
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=False)  # gloo/CPU: pinned memory is CUDA-only
    for block in model.layers.values():
        fully_shard(block, **kwargs)  # type: ignore[arg-type]
    fully_shard(model, **kwargs)  # type: ignore[arg-type]


def apply_ddp(model: nn.Module, mesh: Mesh) -> nn.Module:
    """Plain data parallelism over the replica group (PyTorch DDP, Li et al. 2020)."""
    group = mesh.sub("dp_replicate").get_group() if mesh.plan.dp_replicate > 1 else mesh.sub("dp_shard").get_group()
    return nn.parallel.DistributedDataParallel(model, process_group=group)


def parallelize(model: Transformer, mesh: Mesh, plan: Plan, *, full_precision: bool) -> nn.Module:
    """TP, recompute, then data parallelism; returns the module to call (DDP wraps, FSDP2 does not)."""
    if plan.tp > 1:
        apply_tp(model, mesh, plan)
    apply_recompute(model, plan)
    if plan.dp > 1 and plan.sharding in ("zero2", "zero3"):
        apply_fsdp(model, mesh, plan, full_precision)
        return model
    if plan.dp > 1:
        return apply_ddp(model, mesh)
    return model
