"""The training loop: AdamW with warm-up and cosine decay, gradient clipping, accumulation,
metrics per step, and distributed checkpoints.

Loss is the mean token cross-entropy of the global batch: micro-batch losses are divided by
their count (pipelining's ``scale_grads`` does the same) and data-parallel gradients are
averaged by DDP/FSDP, so every layout computes the single-device gradient.
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from plait import strict_json
from plait.plan.plan import FULL_PRECISIONS, Plan
from plait.run.local import is_dtensor
from plait.run.mesh import Mesh
from plait.run.worker_config import SEED


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Optimiser and run settings (not part of the parallel plan)."""

    steps: int = 10
    lr: float = 3e-3
    warmup_steps: int = 2
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    max_grad_norm: float = 1.0
    seed: int = SEED
    on_nonfinite: str = "stop"
    """A step whose global gradient norm is not finite: ``stop`` the run (exit code 3) or ``skip`` its update."""


NAN_HOOK = "PLAIT_TEST_NAN_AT_STEP"
"""Test hook: every rank's gradients become NaN at this (1-based) step; ``STEP@RANK``: that rank's only."""


def nan_hook_fires(step: int) -> bool:
    """Whether :data:`NAN_HOOK` poisons this rank's gradients at optimizer step ``step`` (0-based)."""
    at, _, rank = os.environ.get(NAN_HOOK, "").partition("@")
    return at == str(step + 1) and (not rank or rank == str(dist.get_rank()))


def agreed_norm(norm: float, group: dist.ProcessGroup, device: str) -> float:
    """``norm``, or NaN on every rank of ``group`` where any rank's is not finite. Under a method that averages
    parameters rather than gradients (local SGD, DiLoCo, gossip, Crossbow) each replica clips by its own norm, so
    one replica's step can be non-finite alone; skipping it there only would leave that rank's optimizer, and the
    collectives inside its ``step``, one behind its peers' (a hang): the replicas skip together."""
    flag = torch.tensor([0.0 if math.isfinite(norm) else 1.0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    return norm if flag.item() == 0.0 else float("nan")
FAIL_HOOK = "PLAIT_TEST_FAIL_AT_STEP"
"""Test hook: rank 1 exits at the start of this (1-based) step in the first attempt (before any restart)."""


class NonFiniteStep(Exception):
    """A step's loss or gradients were not finite and the run stops (``TrainConfig.on_nonfinite = "stop"``)."""


def lr_lambda(config: TrainConfig):  # type: ignore[no-untyped-def]
    """Linear warm-up, then cosine decay to ``min_lr_ratio`` (Loshchilov & Hutter 2017)."""
    def factor(step: int) -> float:
        if step < config.warmup_steps:
            return (step + 1) / config.warmup_steps
        progress = min(1.0, (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps))
        return config.min_lr_ratio + (1 - config.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
    return factor


def cross_entropy(logits_BSV: torch.Tensor, targets_BS: torch.Tensor) -> torch.Tensor:
    """Mean token cross-entropy in fp32."""
    return F.cross_entropy(logits_BSV.float().flatten(0, 1), targets_BS.flatten())


def reduce_partial_gradients(params: list[torch.Tensor]) -> int:
    """All-reduce, once per step and one flat buffer per group, the gradients DTensor leaves as partial sums.

    Under sequence parallelism the norm weights are replicated while their inputs are split over the
    sequence, so each TP rank holds a partial sum of their gradients (DTensor ``Partial``). Left so,
    every optimizer op that reads them (norm, clip, both AdamW moments) re-reduces them, one small
    all-reduce each; Megatron-LM reduces them once per step in one flat buffer
    (``_allreduce_layernorm_grads`` in megatron/core/distributed/finalize_model_grads.py), and so
    does this. Returns the number of all-reduces issued."""
    if not any(is_dtensor(p.grad) for p in params):  # DDP and one process: nothing partial, no DTensor import
        return 0
    from torch.distributed.tensor import DTensor, Partial, Replicate

    groups: dict[tuple[object, tuple[int, ...]], list[torch.Tensor]] = {}
    for p in params:
        grad = p.grad
        if not isinstance(grad, DTensor):
            continue
        dims = tuple(i for i, pl in enumerate(grad.placements) if isinstance(pl, Partial) and pl.reduce_op == "sum")
        if dims:
            groups.setdefault((grad.device_mesh, dims), []).append(p)
    for (mesh, dims), members in groups.items():
        local = [p.grad.to_local() for p in members]  # type: ignore[union-attr]
        flat = torch.cat([t.reshape(-1) for t in local])
        for dim in dims:
            dist.all_reduce(flat, group=mesh.get_group(dim))  # type: ignore[attr-defined]
        offset = 0
        for p, t in zip(members, local):
            grad = p.grad
            assert isinstance(grad, DTensor)
            placements = [Replicate() if i in dims else pl for i, pl in enumerate(grad.placements)]
            reduced = flat[offset:offset + t.numel()].view_as(t)
            offset += t.numel()
            p.grad = DTensor.from_local(reduced, grad.device_mesh, placements, run_check=False,
                                        shape=grad.shape, stride=grad.stride())
    return sum(len(dims) for _, dims in groups)


def clip_gradients(params: list[torch.Tensor], max_norm: float, mesh: Mesh,
                   expert_params: list[torch.Tensor] | None = None) -> float:
    """Clip by the global norm over all stages (DTensor-aware; summed across pipeline ranks).

    ``expert_params`` (MoE with ep > 1, :func:`plait.run.moe.expert_parameters`) differ across the EP
    group, so their squared norm is also summed over it, as torchtitan's ``_clip_grad_norm_with_ep`` does."""
    expert_ids = {id(p) for p in expert_params or []}
    dense = [p for p in params if p.grad is not None and id(p) not in expert_ids]
    experts = [p for p in expert_params or [] if p.grad is not None]
    squared = _squared_grad_norm(dense)
    if expert_params:
        expert_squared = _squared_grad_norm(experts)
        dist.all_reduce(expert_squared, group=mesh.expert["ep"].get_group())
        squared = squared + expert_squared
    if mesh.plan.pp > 1:
        dist.all_reduce(squared, group=mesh.sub("pp").get_group())
    norm = squared.sqrt()
    for group in _foreach_groups(dense + experts):
        torch.nn.utils.clip_grads_with_norm_(group, max_norm, norm)
    return float(norm)


def _foreach_groups(params: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    """Parameters whose gradients one foreach kernel can take: foreach kernels mix neither DTensor and
    Tensor nor DTensors of different meshes (FSDP2-sharded experts live on the expert mesh)."""
    groups: dict[object, list[torch.Tensor]] = {}
    for p in params:
        groups.setdefault(getattr(p.grad, "device_mesh", None), []).append(p)
    return list(groups.values())


def _squared_grad_norm(params: list[torch.Tensor]) -> torch.Tensor:
    """Squared 2-norm of the gradients; a DTensor (TP/FSDP2) group's norm is completed over its mesh."""
    squared = torch.zeros((), dtype=torch.float32)
    for group in _foreach_groups(params):
        norm = torch.nn.utils.get_total_norm([p.grad for p in group])
        squared = squared + (norm.full_tensor() if hasattr(norm, "full_tensor") else norm).float() ** 2
    return squared


def resident_bytes() -> float:
    """This process's peak resident set size (``VmHWM`` in ``/proc/self/status``).

    Not ``getrusage``'s ``ru_maxrss``: Linux keeps it across ``fork`` and ``execve`` (getrusage(2): "the
    resource usages are preserved across execve"), so a rank started by torchrun (or by calibrate) reports at
    least its launcher's resident size at the fork. ``VmHWM`` belongs to the address space ``execve`` makes.
    Where ``/proc`` is absent, ``ru_maxrss`` (bytes on macOS, KiB elsewhere)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return float(line.split()[1]) * 1024.0  # kB
    except OSError:
        pass
    rss = float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return rss if sys.platform == "darwin" else rss * 1024.0


def peak_memory_bytes() -> float:
    """Peak device memory (CUDA) or peak resident set size of this process (CPU)."""
    if torch.cuda.is_available():
        return float(torch.cuda.max_memory_allocated())
    return resident_bytes()


@dataclass
class StepMetrics:
    """What one optimizer step reports."""

    step: int
    loss: float
    grad_norm: float
    step_time_s: float
    tokens_per_s: float
    peak_memory_bytes: float
    sync_bytes: int | None = None
    """Payload bytes this rank handed to its replica group's collectives in the step (plans with a ``dp_sync``
    other than the all-reduce: :func:`plait.run.counting.counted_bytes`); absent otherwise."""
    cp_bytes: int | None = None
    """Bytes this rank sent its cp peers in attention in the step (plait's own context parallelism,
    :func:`plait.run.context.cp_sent_bytes`); absent otherwise."""
    started_s: float | None = None
    """When the step began, on this process's monotonic clock (``time.perf_counter``): the differences between
    consecutive rows are the period the job steps at, which also holds what ``step_time_s`` leaves out (waiting
    for the other ranks in the loss's reduction after the step, logging)."""
    swap_bytes: int | None = None
    """Bytes of saved activations the reporting rank's hooks packed in the step (``swap_activations``,
    :class:`plait.run.swap.ActivationSwap`); absent otherwise."""
    swap_layer_bytes: int | None = None
    """Of those, the bytes packed inside transformer blocks."""
    grid_bytes: dict[str, int] | None = None
    """A tensor-parallel grid's payload bytes of the step on the reporting rank, per ``part/group/kind``
    (:mod:`plait.run.tp2d_train`); absent otherwise."""

    def to_json(self) -> str:
        """Strict JSON: a non-finite figure is ``null``."""
        optional = ("sync_bytes", "cp_bytes", "started_s", "swap_bytes", "swap_layer_bytes", "grid_bytes")
        return strict_json.dumps({k: v for k, v in self.__dict__.items() if k not in optional or v is not None})


def autocast(plan: Plan, full_precision: bool, device: str) -> contextlib.AbstractContextManager[None]:
    """bf16/fp16 autocast for plans that are not FSDP-managed (FSDP2 casts itself)."""
    if plan.precision in FULL_PRECISIONS:  # fp32 storage; tf32 lets matmuls round operands on tensor cores
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = plan.precision == "tf32"
        return contextlib.nullcontext()
    if full_precision or plan.fsdp_managed:
        return contextlib.nullcontext()
    dtype = torch.float16 if plan.precision == "fp16" else torch.bfloat16
    return torch.autocast(device_type=device, dtype=dtype)


def mean_over_dp(value: float, mesh: Mesh) -> float:
    """Average a scalar over the data-parallel ranks (for logging the global-batch loss)."""
    if mesh.plan.dp == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float64)
    for axis in ("dp_replicate", "dp_shard"):
        if getattr(mesh.plan, axis) > 1:
            dist.all_reduce(tensor, group=mesh.sub(axis).get_group())
    return float(tensor.item()) / mesh.plan.dp


def write_metrics(path: Path | None, metrics: StepMetrics) -> None:
    """Append one JSON line."""
    if path is not None:
        with path.open("a", encoding="utf-8") as handle:
            handle.write(metrics.to_json() + "\n")


def micro_batches(inputs: torch.Tensor, targets: torch.Tensor, size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Split a rank's batch into micro-batches of ``size`` rows."""
    return list(zip(inputs.split(size), targets.split(size)))


def sync_context(module: nn.Module, last: bool) -> contextlib.AbstractContextManager[None]:
    """Skip DDP's gradient all-reduce on all but the last micro-batch (Li et al. 2020, Sec. 3.2.4)."""
    if isinstance(module, nn.parallel.DistributedDataParallel) and not last:
        return module.no_sync()
    return contextlib.nullcontext()


def gather_once(module: nn.Module, last: bool, reshard_after_forward: bool) -> None:
    """Under FSDP2, micro-batches before the last keep their parameters gathered and their gradients unsharded
    (``set_requires_gradient_sync(False)``, ``set_reshard_after_backward(False)``, FSDP2's accumulation without
    communication) and the last reduces once. Ranks that run different numbers of micro-batches (an uneven batch
    split, :mod:`plait.run.uneven`) then issue the same collectives in the same order: each group's all-gather in
    the first forward, and the last micro-batch's backward gathers (ZeRO-3) and reduce-scatters once, as a rank
    with one micro-batch does. Without it a rank with more micro-batches would wait for collectives its peers
    never issue. A no-op for modules FSDP2 does not manage."""
    from torch.distributed.fsdp import FSDPModule

    if isinstance(module, FSDPModule):
        module.set_requires_gradient_sync(last)
        module.set_reshard_after_backward(last)
        module.set_reshard_after_forward(last and reshard_after_forward)


def timed() -> float:
    """Wall clock after the device has finished its queue."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter()
