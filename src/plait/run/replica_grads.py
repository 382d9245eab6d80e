"""Compressed gradient reduction over replicas that DDP cannot wrap: tensor-parallel and pipeline-stage replicas.

PyTorch's DDP takes neither DTensor tensor parallelism nor pipeline stages, so for those plans the communication
hooks DDP runs for whole replicas — ``bf16_compress_hook``, ``fp16_compress_hook``, ``powerSGD_hook`` and plait's
error-feedback hook (:mod:`plait.run.compress`) — are called here, on one bucket of this rank's local gradients
(its TP shards of its stages' parameters), over the data-parallel group of the ranks that hold the same shards.
:func:`reduce_gradients` runs them after the backward pass and before clipping, where DDP would have reduced
them; nothing overlaps the backward. The hooks read only ``buffer``, ``gradients``, ``parameters``, ``index`` and
``is_last`` of a ``dist.GradBucket`` (torch 2.13); :class:`LocalBucket` gives them those over a flat copy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

from plait import sync as methods
from plait.errors import ConfigError
from plait.run.compress import Quantize, TopK, error_feedback_hook
from plait.run.local import is_dtensor, local_tensor
from plait.run.site_compress import site_topk_state
from plait.run.site_quantize import site_quantize_state
from plait.run.sites import Reducer, SiteReducer
from plait.run.wrapped import Wrapped
from plait.sync import METHODS, SyncMethod

ORTHOGONALIZATION_EPSILON = 1e-8
"""Added to each column's norm in PowerSGD's Gram-Schmidt (rank <= 2): an all-zero gradient — a vocab-parallel
embedding shard no token of the batch falls in — would otherwise divide 0 by 0 (the value torch's
``_orthogonalize_gram_schmidt`` error message recommends)."""
HALF_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
"""The torch type of each 16-bit all-reduce (:class:`plait.sync.HalfPrecision`)."""


def _bf16_gradients(state, bucket):  # type: ignore[no-untyped-def]
    return default_hooks.bf16_compress_hook(state, bucket)


def _fp16_gradients(state, bucket):  # type: ignore[no-untyped-def]
    return default_hooks.fp16_compress_hook(state, bucket)


def comm_hook(sync: SyncMethod, replicas: Reducer) -> tuple[Any, Callable[..., Any]]:
    """(state, hook) of a compressing method over the ``replicas``, as ``DistributedDataParallel.
    register_comm_hook`` takes them. DDP refuses the bf16 hook *by name* off CUDA/NCCL (``DDP._check_comm_hook``);
    called from a hook of another name it runs on gloo the same. Across sites bf16/fp16 take
    :func:`compress_hook` (PyTorch's hooks all-reduce flat); PowerSGD's small factors and the all-gathers of top-k
    and quantize stay flat, as the cost model charges them."""
    return sync.comm_hook(_Hooks(replicas))


class _Hooks:
    """Each compressing family's (state, hook) over ``replicas`` (:class:`plait.sync.hooks.GradientHooks`)."""

    def __init__(self, replicas: Reducer) -> None:
        self.replicas = replicas

    def half(self, method: methods.HalfPrecision) -> tuple[Any, Callable[..., Any]]:
        if isinstance(self.replicas, SiteReducer):
            return (self.replicas, HALF_DTYPES[method.dtype]), compress_hook
        return self.replicas.group, _bf16_gradients if method.dtype == "bf16" else _fp16_gradients

    def topk(self, method: methods.TopK) -> tuple[Any, Callable[..., Any]]:
        return TopK(method.ratio, self.replicas.group), error_feedback_hook

    def quantize(self, method: methods.Quantize) -> tuple[Any, Callable[..., Any]]:
        return Quantize(method.bits, self.replicas.group), error_feedback_hook

    def site_topk(self, method: methods.SiteTopK) -> tuple[Any, Callable[..., Any]]:
        return site_topk_state(method.ratio, self.replicas)  # type: ignore[return-value]

    def site_quantize(self, method: methods.SiteQuantize) -> tuple[Any, Callable[..., Any]]:
        return site_quantize_state(method.bits, self.replicas)  # type: ignore[return-value]

    def powersgd(self, method: methods.PowerSGD) -> tuple[Any, Callable[..., Any]]:
        state = powerSGD_hook.PowerSGDState(
            process_group=self.replicas.group, matrix_approximation_rank=method.rank,
            min_compression_rate=method.min_compression_rate, start_powerSGD_iter=method.start_iter,
            use_error_feedback=True, warm_start=True, orthogonalization_epsilon=ORTHOGONALIZATION_EPSILON)
        return state, powerSGD_hook.powerSGD_hook

    def uncompressed(self, method: SyncMethod) -> NoReturn:
        compressing = ", ".join(name for name, kind in METHODS.items() if kind.compressed)
        raise ConfigError(f"dp_sync={method.spec!r} does not compress gradients (compressing: {compressing})")


def compress_hook(state, bucket):  # type: ignore[no-untyped-def]
    """PyTorch's ``_compress_hook`` (cast the bucket, divide by the replicas, all-reduce, cast back into the
    bucket) on the all-reduce of ``state``'s :class:`plait.run.sites.Reducer`; ``state``: (reducer, dtype)."""
    replicas, dtype = state
    buffer = bucket.buffer()
    compressed = buffer.to(dtype).div_(replicas.size)
    return replicas.all_reduce(compressed).then(lambda done: buffer.copy_(done.value()[0]))


def shard_gradients_like_parameters(params: list[torch.Tensor]) -> None:
    """Give every DTensor gradient its parameter's placements, so that a rank sends only its own shard. DTensor's
    embedding backward returns the vocab-parallel embedding's gradient ``Replicate`` (the whole table on every TP
    rank, torch 2.13); to ``Shard(0)`` it is a local slice, no communication."""
    for p in params:
        grad = p.grad
        if is_dtensor(p) and is_dtensor(grad) and grad.placements != p.placements:  # type: ignore[union-attr]
            p.grad = grad.redistribute(p.device_mesh, p.placements)


class LocalBucket:
    """What a DDP communication hook reads of a ``dist.GradBucket``, over ``params``' local gradients: one flat
    buffer and, in it, a view shaped as each gradient (PowerSGD writes its results through them)."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        self._params = params
        self._grads = [local_tensor(p.grad) for p in params]  # type: ignore[arg-type]
        self._buffer = torch.cat([g.reshape(-1) for g in self._grads])
        pieces = self._buffer.split([g.numel() for g in self._grads])
        self._views = [piece.view_as(g) for piece, g in zip(pieces, self._grads)]

    def write(self, flat: torch.Tensor) -> None:
        """Copy ``flat`` (laid out as the buffer) into the parameters' own gradients."""
        for grad, piece in zip(self._grads, flat.split([g.numel() for g in self._grads])):
            grad.copy_(piece.view_as(grad))

    def buffer(self) -> torch.Tensor:
        return self._buffer

    def gradients(self) -> list[torch.Tensor]:
        return self._views

    def parameters(self) -> list[torch.Tensor]:
        return self._params

    def index(self) -> int:
        return 0  # one bucket: PowerSGD keys its error and warm-start memories by it

    def is_last(self) -> bool:
        return True  # PowerSGD counts its iterations at a step's last bucket


class LocalGradients(Wrapped):
    """The optimizer ``inner`` after :meth:`reduce`, which replaces each local gradient by the replicas' mean as
    ``sync``'s DDP hook computes it over the ``replicas``."""

    def __init__(self, inner: torch.optim.Optimizer, sync: SyncMethod, replicas: Reducer) -> None:
        super().__init__(inner)
        self.sync = sync
        self.hook_state, self.hook = comm_hook(sync, replicas)

    @torch.no_grad()
    def reduce(self) -> None:
        """Every local gradient becomes the replicas' (compressed) mean."""
        params = [p for g in self.param_groups for p in g["params"] if p.grad is not None]
        shard_gradients_like_parameters(params)
        bucket = LocalBucket(params)
        mean = self.hook(self.hook_state, bucket).wait()
        bucket.write(mean[0] if isinstance(mean, list) else mean)


def reduce_gradients(optimizer: torch.optim.Optimizer) -> None:
    """After a step's backward passes, before clipping: the optimizer's own ``reduce`` where it has one
    (:meth:`LocalGradients.reduce`; :meth:`plait.run.outer_loop.PALSGD.reduce` in its warm-up); else nothing: DDP or
    the optimizer's step synchronizes."""
    reduce = getattr(optimizer, "reduce", None)
    if callable(reduce):
        reduce()
