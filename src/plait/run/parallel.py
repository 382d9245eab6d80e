"""Apply a plan to a model (part) with torch.distributed's own wrappers, in torchtitan's order:
tensor/sequence parallelism (DTensor ``parallelize_module``), activation checkpointing, then
data parallelism (FSDP2 ``fully_shard`` for ZeRO-2/3 and HSDP, DDP for plain replicas and,
with ``ZeroRedundancyOptimizer``, ZeRO-1).

The TP plan is Megatron's (Shoeybi et al. 2019): q/k/v and MLP-up column-wise, output and
MLP-down row-wise; with sequence parallelism the norms run on sequence shards and the
row-wise outputs reduce-scatter over the sequence (Korthikanti et al. 2022). With ``overlap_chunks`` > 1 the
blocks' collectives run chunked beside their GEMMs instead (:mod:`plait.run.chunked_tp`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

from plait.plan.plan import Plan
from plait.run import async_tp, context, float8
from plait.run.chunked import Sent
from plait.run.chunked_tp import apply_chunked_tp
from plait.run.mesh import Mesh
from plait.run.model import Transformer
from plait.run.moe import apply_ep, ignore_experts_in_ddp, shard_experts

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import MixedPrecisionPolicy

# FSDP2 and DTensor are imported where a plan uses them: a DDP or single-process rank never does, and the import
# is about 0.7 s of its start-up (plait/run/local.py).


def apply_tp(model: Transformer, mesh: Mesh, plan: Plan) -> None:
    """Megatron-style tensor parallelism (with sequence parallelism when ``plan.sp``) over the mesh's tp axis."""
    apply_tp_on(model, mesh.sub("tp"), plan)


def apply_tp_on(model: Transformer, tp_mesh: DeviceMesh, plan: Plan) -> None:
    """Megatron-style tensor parallelism over ``tp_mesh`` (a stage's own ranks where stages differ in TP degree,
    :mod:`plait.run.stage_tp`)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    seq = Shard(1) if plan.sp else Replicate()
    top: dict[str, object] = {}
    # Learned positions are added to the whole sequence, which enters the sequence-parallel region at the first
    # layer (Megatron-LM's LanguageModelEmbedding: all-reduce, add positions, scatter_to_sequence_parallel_region)
    positions = model.pos_embeddings is not None and plan.sp
    if model.tok_embeddings is not None:
        embedded = Replicate() if positions else seq
        top["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=embedded)
    if model.norm is not None:
        if plan.sp:
            top["norm"] = SequenceParallel()
        top["output"] = ColwiseParallel(input_layouts=seq, output_layouts=Replicate(), use_local_output=True)
    if top:
        parallelize_module(model, tp_mesh, top)  # type: ignore[arg-type]
    sent = Sent()  # the ledger of the chunked blocks' collectives (overlap_chunks > 1)
    for block in model.layers.values():
        if plan.overlap_chunks > 1:  # the block's collectives chunked beside its GEMMs
            apply_chunked_tp(block, tp_mesh, plan, sent)  # type: ignore[arg-type]
            continue
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
    if positions:  # the scatter: each rank keeps its sequence chunk (no communication; all-gather in backward)
        first = next(iter(model.layers.values()))
        scatter = PrepareModuleInput(input_layouts=(Replicate(), None, None),
                                     desired_input_layouts=(Shard(1), None, None), use_local_output=True)
        parallelize_module(first, tp_mesh, scatter)  # type: ignore[arg-type]


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
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if plan.precision in ("bf16", "fp8"):
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32
                                    if plan.grad_reduce_dtype == "fp32" else torch.bfloat16)
    if plan.precision == "fp16":
        return MixedPrecisionPolicy(param_dtype=torch.float16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def apply_fsdp(model: Transformer, mesh: Mesh, plan: Plan, full_precision: bool) -> None:
    """FSDP2 per layer and at the root: ZeRO-3 reshards after forward, ZeRO-2 keeps parameters gathered, and so does
    ZeRO-3 under a pipeline, whose schedule keeps a stage gathered through its backwards anyway (PyTorch pipelining
    runs them with ``set_reshard_after_backward(False)``): resharding after each forward would only re-gather per
    micro-batch (torchtitan does the same: "For PP, do not reshard after forward to avoid per-microbatch
    all-gathers"; the ``plait`` engine's ``pipeline_keeps_gathered``). HSDP replicas under local SGD or DiLoCo shard
    within themselves only (their optimizer averages across them)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    dp_mesh = mesh.sub("dp_replicate", "dp_shard") if plan.dp_replicate > 1 else mesh.sub("dp_shard")
    if plan.dp_sync.infrequent:  # replicas train apart; the optimizer averages them
        dp_mesh = mesh.sub("dp_shard")
    if plan.cp > 1:
        dp_mesh = context.fsdp_mesh(mesh)  # cp ranks average their gradients too (dp_shard_cp)
    kwargs = {
        "mesh": dp_mesh,
        "reshard_after_forward": plan.sharding == "zero3" and plan.pp == 1,
        "mp_policy": MixedPrecisionPolicy() if full_precision else _mixed_precision(plan),
    }
    if plan.offload_params:  # parameters, gradients and the optimizer step on the host; optimizer-only
        # offload (ZeRO-Offload) is plait.run.optim.HostOffloadOptimizer. Pinned memory is CUDA-only.
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=dp_mesh.device_type == "cuda")
    shard_experts(model, mesh, kwargs)  # first: over the expert-data-parallel ranks (ep > 1 only)
    for block in model.layers.values():
        fully_shard(block, **kwargs)  # type: ignore[arg-type]
    fully_shard(model, **kwargs)  # type: ignore[arg-type]


def replica_group(mesh: Mesh) -> dist.ProcessGroup:
    """The ranks DDP averages gradients over: the data-parallel replicas (and the cp ranks, which average too)."""
    if mesh.plan.cp > 1:
        return context.replica_group(mesh)
    return mesh.sub("dp_replicate").get_group() if mesh.plan.dp_replicate > 1 else mesh.sub("dp_shard").get_group()


def apply_ddp(model: nn.Module, mesh: Mesh) -> nn.Module:
    """Plain data parallelism over the replica group (PyTorch DDP, Li et al. 2020)."""
    group = replica_group(mesh)
    ignore_experts_in_ddp(model, mesh.plan)  # ep > 1: experts are not replicas; moe.reduce_expert_gradients
    # cp > 1: each cp rank holds its own shard of the rope buffers, which DDP must not broadcast
    method = mesh.plan.dp_sync
    # a compressed or periodic method (pure data parallelism: plan rules), or, across sites, DDP's buckets on the
    # hierarchical all-reduce (plait.run.sites)
    if not method.is_allreduce or mesh.site_gpus:
        from plait.run.sync import wrap_model

        # DDP takes neither TP nor PP: the optimizer wrapper reduces (the all-reduce with them is refused before)
        split = not method.is_allreduce and (mesh.plan.tp > 1 or mesh.plan.pp > 1)
        return wrap_model(model, method, mesh.replicas, split, broadcast_buffers=mesh.plan.cp == 1)
    return nn.parallel.DistributedDataParallel(model, process_group=group, broadcast_buffers=mesh.plan.cp == 1)


def parallelize(model: Transformer, mesh: Mesh, plan: Plan, *, full_precision: bool) -> nn.Module:
    """TP, EP (this rank's experts), recompute, then data parallelism; returns the module to call (DDP wraps,
    FSDP2 does not)."""
    if plan.precision == "fp8" and not full_precision:
        float8.convert_to_float8(model, plan)  # torchao Float8Linear, before TP and FSDP wrap the layers
    if plan.tp > 1:
        apply_tp(model, mesh, plan)
    apply_ep(model, mesh)
    apply_recompute(model, plan)
    if plan.tp_comm_overlap:
        async_tp.apply_async_tp(model, mesh)  # compiles each block: after TP and recompute, before FSDP
    if plan.fsdp_managed:
        apply_fsdp(model, mesh, plan, full_precision)
        return model
    if plan.dp * plan.cp > 1:
        return apply_ddp(model, mesh)
    return model
