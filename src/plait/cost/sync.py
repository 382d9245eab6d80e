"""Bytes each data-parallel replica hands to collectives per step, by synchronization method (issue 14).

Payload bytes: the tensors given to ``all_reduce`` (exact integers for a model and plan); the collective's own
traffic on the wire is the payload times its algorithm's factor (ring all-reduce: ``2 (n-1)/n`` per rank,
Patarasuk & Yuan, JPDC 69(2), 2009), applied where time is costed. For a replica holding whole (unsharded)
gradients, fp32 (plait's runtime and PyTorch DDP keep gradients in the parameter dtype):

- ``allreduce``: every gradient element, 4 bytes;
- ``bf16``/``fp16``: every element in 2 bytes (PyTorch ``_compress_hook``: one all-reduce of the cast bucket);
- ``powersgd:rank=R``: each gradient viewed as ``n x m`` (``shape[0] x rest``), ``r = min(n, m, R)``; compressed
  when ``(n + m) r C < n m`` (``min_compression_rate`` C; torch ``_should_compress``), then its P (``n r``) and Q
  (``m r``) factors are all-reduced, else the whole tensor (Vogels et al. 2019, Algorithm 1; torch 2.13
  ``powerSGD_hook``, docs/research/sync-methods.md); steps before ``start_iter`` send the plain all-reduce;
- ``topk:ratio=F``: per gradient tensor ``k = ceil(F numel)`` fp32 values and int32 indices, all-gathered
  (each rank hands over its own ``8 k`` bytes; Lin et al. 2018, DGC; ``plait.run.sync.topk_hook``);
- ``local_sgd:every=H``: no gradient traffic; every H steps one all-reduce of every parameter (PyTorch
  ``PeriodicModelAverager``): per step, the parameters' bytes over H.
"""

from __future__ import annotations

import math

from plait.errors import ConfigError
from plait.plan.sync import Sync
from plait.workload.tensors import Shape

GRAD_BYTES = 4
"""fp32 gradients and parameters (the replica's own copy; autocast computes in bf16)."""
RUNNABLE = ("allreduce", "bf16", "fp16", "powersgd", "topk", "local_sgd")
TOPK_ENTRY_BYTES = 4 + 4
"""A kept gradient entry: its fp32 value and int32 index."""
"""Methods whose bytes are modelled here and which ``plait.run.sync`` runs."""


def _powersgd_elements(shape: Shape, rank: int, min_compression_rate: float) -> int:
    n = shape[0]
    m = math.prod(shape[1:]) if len(shape) > 1 else 1
    r = min(n, m, rank)
    return (n + m) * r if (n + m) * r * min_compression_rate < n * m else n * m


def payload_bytes(sync: Sync, shapes: list[Shape], step: int | None = None) -> float:
    """Bytes one replica hands to collectives in one step (``step``: that step, counted from 0, for the methods
    whose traffic changes with it; ``None``: the mean over a period in steady state)."""
    elements = sum(math.prod(s) for s in shapes)
    if sync.method == "allreduce":
        return elements * GRAD_BYTES
    if sync.method in ("bf16", "fp16"):
        return elements * 2
    if sync.method == "powersgd":
        if step is not None and step < sync["start_iter"]:
            return elements * GRAD_BYTES
        rank, rate = int(sync["rank"]), sync["min_compression_rate"]
        return sum(_powersgd_elements(s, rank, rate) for s in shapes) * GRAD_BYTES
    if sync.method == "topk":
        return sum(math.ceil(sync["ratio"] * math.prod(s)) for s in shapes) * TOPK_ENTRY_BYTES
    if sync.method == "local_sgd":
        every = sync.every
        if step is None:
            return elements * GRAD_BYTES / every
        return elements * GRAD_BYTES if step % every == 0 else 0.0  # PeriodicModelAverager: steps 0, H, 2H, ...
    raise ConfigError(f"dp_sync={sync.spec!r}: not modelled yet (modelled: {', '.join(RUNNABLE)})")
