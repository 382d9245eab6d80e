"""What one rank of ``plait run`` trains with: its mesh, its layout, its model parts, their optimizer and its loss.

Built once in the initialised process group by :func:`set_up_rank`; the training loop is :mod:`plait.run.worker`'s.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from plait.plan.io import read_plan_parts
from plait.plan.mixed import rank_layout, replica_micro_batches
from plait.run.loss_scale import LossScale, loss_scale_for
from plait.run.mesh import Mesh, build_mesh, device_type
from plait.run.model import build_model
from plait.run.optim import build_optimizer
from plait.run.parallel import parallelize
from plait.run.pipeline import local_stages, stage_layers
from plait.run.sites import named_site_gpus
from plait.run.slowdown import slow_down
from plait.run.train import TrainConfig, cross_entropy
from plait.run.uneven import Uneven, rank_steps
from plait.run.worker_config import WorkerConfig
from plait.workload.tensors import parameter_shapes


@dataclass(frozen=True)
class Rank:
    """One rank's training set-up. ``plan``: this rank's layout (a mixed data split's group runs its own micro-batch
    and recomputation); ``container``: the parts as one module (checkpoints); ``steps``: this rank's optimizer steps
    (per-group local SGD counts its own); ``counts_differ``: ranks run different micro-batch counts, so FSDP2
    gathers and reduces once a step."""

    mesh: Mesh
    plan: Any
    parts: list[nn.Module]
    stage_ids: list[int]
    container: nn.Module
    steps: int
    config: TrainConfig
    params: list[nn.Parameter]
    optimizer: Any
    scheduler: Any
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    scaling: LossScale | None
    counts_differ: bool


def build_parts(mesh: Mesh, spec, plan, seq_len: int, seed: int, full_precision: bool,  # type: ignore[no-untyped-def]
                layer_counts: tuple[int, ...] = ()):
    """This rank's model parts (one without pipelining), parallelised, and their stage indices; ``layer_counts``:
    layers per stage (default: as even as possible)."""
    if plan.pp == 1:
        model = build_model(spec, seq_len, seed).to(device_type())  # on CUDA: parameters and rope buffers
        return [parallelize(model, mesh, plan, full_precision=full_precision)], [0]
    num_stages = plan.pp * plan.vpp
    layers = stage_layers(spec.num_layers, num_stages, layer_counts or plan.stage_layers)
    indices = local_stages(mesh, plan)
    parts = []
    for stage in indices:
        model = build_model(spec, seq_len, seed, keep_layers=layers[stage], first=stage == 0,
                            last=stage == num_stages - 1).to(device_type())
        own = plan.for_stage(stage) if plan.per_stage else plan  # the stage's own recomputation and sharding
        parts.append(parallelize(model, mesh, own, full_precision=full_precision))
    return parts, indices


def set_up_rank(args: WorkerConfig, job, plan, spec, device: str,  # type: ignore[no-untyped-def]
                uneven: Uneven) -> Rank:
    """This rank's :class:`Rank` for ``plan`` of ``spec`` on ``device``."""
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    torch.manual_seed(args.seed)
    mesh = build_mesh(plan, named_site_gpus(args.cluster or job.cluster))
    # a mixed data split whose groups run their own micro-batch and recomputation: this rank's (same gradients)
    mixed = read_plan_parts(args.plan)[2]
    plan = rank_layout(plan, mixed, dist.get_rank())
    parts, stage_ids = build_parts(mesh, spec, plan, plan.seq_len, args.seed, args.full_precision, uneven.stage_layers)
    # per-group local SGD: this rank's own step count, hence its own learning-rate schedule
    steps = rank_steps(args.steps, plan.dp_sync.every, uneven.local_steps, mesh.dp_rank)
    config = TrainConfig(steps=steps, lr=args.lr, seed=args.seed, on_nonfinite=args.on_nonfinite)
    params = [p for part in parts for p in part.parameters()]
    # one stage per rank where stages differ (plait.plan.per_stage): its own sharding shards its optimizer (ZeRO-1)
    own = plan.for_stage(stage_ids[0]) if plan.per_stage else plan
    optimizer, scheduler = build_optimizer(params, mesh, config, own)
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = cross_entropy
    if uneven.slowdown and uneven.slowdown[dist.get_rank()] > 1:  # the inner optimizer: its step is compute
        factor = uneven.slowdown[dist.get_rank()]
        _, loss_fn = slow_down(parts, mesh.is_last_stage_rank, optimizer, cross_entropy, factor)
    scaling = loss_scale_for(own.precision, args.full_precision)  # fp16: dynamic loss scaling
    if scaling is not None:
        loss_fn = scaling.wrap(loss_fn)
    if not plan.dp_sync.is_allreduce and plan.dp > 1:  # local SGD averages in the optimizer step
        optimizer = _synchronizing(optimizer, args, job, plan, spec, mesh, parts, uneven)
    return Rank(mesh=mesh, plan=plan, parts=parts, stage_ids=stage_ids,
                container=parts[0] if len(parts) == 1 else nn.ModuleList(parts), steps=steps, config=config,
                params=params, optimizer=optimizer, scheduler=scheduler, loss_fn=loss_fn, scaling=scaling,
                counts_differ=bool(uneven.batch_split or replica_micro_batches(mixed)))


def _synchronizing(optimizer, args: WorkerConfig, job, plan, spec, mesh: Mesh, parts,  # type: ignore[no-untyped-def]
                   uneven: Uneven):
    """``optimizer`` wrapped by the plan's replica synchronization method (:func:`plait.run.sync.wrap_optimizer`)."""
    from plait.run.sync import named_profile, wrap_optimizer

    sync = plan.dp_sync
    if uneven.local_steps:  # per-group local SGD: this rank averages after its own local steps
        sync = replace(sync, every=uneven.local_steps[mesh.dp_rank])
    profile = named_profile(args.cluster or job.cluster, stride=plan.tp * plan.cp,
                            tokens=plan.micro_batch * plan.seq_len) \
        if getattr(sync, "schedule", "") == "profiled" else None  # DreamDDP's profiled schedule
    return wrap_optimizer(optimizer, sync, mesh.replicas, modules=tuple(parts), whole=parameter_shapes(spec),
                          accumulations=plan.num_micro_batches, split=plan.tp > 1 or plan.pp > 1, profile=profile)
