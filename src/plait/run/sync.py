"""Data-parallel synchronization methods on PyTorch's own pieces (issue 14), and a count of what they send.

- ``allreduce``: DDP with ``default_hooks.allreduce_hook`` (the reducer's own all-reduce, in Python where it can
  be counted);
- ``bf16``/``fp16``: DDP with ``bf16_compress_hook``/``fp16_compress_hook``. DDP refuses the bf16 hook *by name*
  off CUDA/NCCL (``DDP._check_comm_hook``); called from a hook of another name it runs on gloo the same;
- ``powersgd``: DDP with ``powerSGD_hook`` and error feedback, in one bucket (gloo hangs with several buckets
  at the first compressed step; docs/research/sync-methods.md);
- ``local_sgd``: no gradient synchronization; ``PostLocalSGDOptimizer`` with a ``PeriodicModelAverager``
  averages the parameters every H steps (from the first).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

from plait.errors import ConfigError
from plait.plan.sync import Sync

ONE_BUCKET_MB = 1024.0
"""DDP bucket size that puts a small or mid-sized model's gradients in one bucket (PowerSGD on gloo)."""


def _bf16_gradients(state, bucket):  # type: ignore[no-untyped-def]
    return default_hooks.bf16_compress_hook(state, bucket)


def _fp16_gradients(state, bucket):  # type: ignore[no-untyped-def]
    return default_hooks.fp16_compress_hook(state, bucket)


def attach(model: nn.Module, optimizer: torch.optim.Optimizer, sync: Sync) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The module to train and the optimizer to step for ``sync`` over the default process group."""
    if sync.method == "local_sgd":
        from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
        from torch.distributed.optim import PostLocalSGDOptimizer

        return model, PostLocalSGDOptimizer(optimizer, PeriodicModelAverager(period=sync.every, warmup_steps=0))
    if sync.method == "allreduce":
        ddp = DistributedDataParallel(model)
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    elif sync.method in ("bf16", "fp16"):
        ddp = DistributedDataParallel(model)
        ddp.register_comm_hook(None, _bf16_gradients if sync.method == "bf16" else _fp16_gradients)
    elif sync.method == "powersgd":
        ddp = DistributedDataParallel(model, bucket_cap_mb=ONE_BUCKET_MB)
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=int(sync["rank"]),
            min_compression_rate=sync["min_compression_rate"], start_powerSGD_iter=int(sync["start_iter"]),
            use_error_feedback=True, warm_start=True)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    else:
        raise ConfigError(f"dp_sync={sync.spec!r} does not run yet (runs: allreduce, bf16, fp16, powersgd, local_sgd)")
    return ddp, optimizer


@contextlib.contextmanager
def counted_bytes() -> Iterator[list[int]]:
    """Within the block, the payload bytes of every ``torch.distributed.all_reduce`` call, summed into the
    one-element list it yields (the hooks and the averager call it through the module)."""
    total = [0]
    original = dist.all_reduce

    def counting(tensor: torch.Tensor, *args, **kwargs):  # type: ignore[no-untyped-def]
        total[0] += tensor.numel() * tensor.element_size()
        return original(tensor, *args, **kwargs)

    dist.all_reduce = counting  # type: ignore[assignment]
    try:
        yield total
    finally:
        dist.all_reduce = original  # type: ignore[assignment]
