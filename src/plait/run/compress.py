"""Gradient compression with error feedback for DDP's communication hooks: what :mod:`plait.run.sync`
registers for ``topk`` and ``quantize``, written on ``torch.distributed.all_gather_into_tensor`` (no library has
them; docs/research/sync-methods.md).

- ``topk``: per tensor, the error-feedback residual plus the new gradient, its ``k = ceil(ratio * numel)`` largest
  magnitudes sent as fp32 values and int32 indices, every rank's sums averaged, the sent part cleared from the
  residual (Lin et al. 2018, DGC, Sec. 3.1 without momentum correction; Stich et al. 2018 for error feedback);
- ``quantize``: per tensor, residual plus gradient quantized with one fp32 scale — 8 and 4 bits to the nearest of
  ``2^(b-1) - 1`` symmetric levels of ``max |x|``, 1 bit as ``sign(x) * mean |x|`` (EF-SignSGD, Karimireddy et al.
  2019, Algorithm 1) — packed into bytes, every rank's codes gathered, dequantized and averaged.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist


class ErrorFeedback:
    """State of :func:`error_feedback_hook` over ``group``: each parameter's residual, what its messages have not
    carried yet (Stich et al. 2018), and :meth:`exchange`, the method's own message."""

    def __init__(self, group: dist.ProcessGroup | None = None) -> None:
        self.group = group
        self.residuals: dict[int, torch.Tensor] = {}
        """Per parameter (by ``id``: DDP rebuilds its buckets after the first step)."""

    def exchange(self, residual: torch.Tensor) -> torch.Tensor:
        """The ranks' mean of what each sends for ``residual`` (residual plus gradient), with what this rank sent
        taken out of ``residual``."""
        raise NotImplementedError

    def gathered(self, piece: torch.Tensor) -> torch.Tensor:
        """Every rank's ``piece``, concatenated in rank order (``all_gather_into_tensor``)."""
        out = torch.empty(dist.get_world_size(self.group) * piece.numel(), dtype=piece.dtype)
        dist.all_gather_into_tensor(out, piece.contiguous(), group=self.group)
        return out


class TopK(ErrorFeedback):
    """Per tensor, the ``k = ceil(ratio * numel)`` largest magnitudes as fp32 values and int32 indices."""

    def __init__(self, ratio: float, group: dist.ProcessGroup | None = None) -> None:
        super().__init__(group)
        self.ratio = ratio

    def exchange(self, residual: torch.Tensor) -> torch.Tensor:
        world, numel = dist.get_world_size(self.group), residual.numel()
        k = math.ceil(self.ratio * numel)
        chosen = torch.topk(residual.abs(), k, sorted=False).indices
        gathered_values, gathered_indices = self.gathered(residual[chosen]), self.gathered(chosen.to(torch.int32))
        dense = torch.zeros(numel, dtype=residual.dtype)
        dense.index_add_(0, gathered_indices.to(torch.int64), gathered_values)
        residual[chosen] = 0.0
        return dense / world


class Quantize(ErrorFeedback):
    """Per tensor, ``bits``-bit packed codes and one fp32 scale (:func:`quantized`)."""

    def __init__(self, bits: int, group: dist.ProcessGroup | None = None) -> None:
        super().__init__(group)
        self.bits = bits

    def exchange(self, residual: torch.Tensor) -> torch.Tensor:
        world, numel = dist.get_world_size(self.group), residual.numel()
        packed, scale = quantized(residual, self.bits)
        codes, scales = self.gathered(packed), self.gathered(scale)
        total = torch.zeros(numel, dtype=residual.dtype)
        for rank, chunk in enumerate(codes.chunk(world)):
            total += dequantized(chunk, scales[rank:rank + 1], self.bits, numel)
        residual -= dequantized(packed, scale, self.bits, numel)
        return total / world


def error_feedback_hook(state, bucket):  # type: ignore[no-untyped-def]
    """Compressed all-reduce of ``bucket`` (a ``dist.GradBucket``) with error feedback: per gradient, in the flat
    buffer's order, the residual takes the new gradient and ``state.exchange`` (an :class:`ErrorFeedback`) sends
    it and returns the ranks' mean. (Unannotated: DDP checks a hook's annotations against the classes themselves,
    and this module's annotations are strings.)"""
    buffer = bucket.buffer()
    offset = 0
    for parameter, grad in zip(bucket.parameters(), bucket.gradients()):
        numel = grad.numel()
        residual = state.residuals.setdefault(id(parameter), torch.zeros(numel, dtype=buffer.dtype))
        residual += buffer[offset:offset + numel]
        buffer[offset:offset + numel] = state.exchange(residual)
        offset += numel
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    future.set_result(buffer)
    return future


def quantized(x: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed uint8 codes of ``ceil(numel * bits / 8)`` bytes, fp32 scale) of ``x`` (:mod:`plait.run.sync`)."""
    if bits == 1:
        scale = x.abs().mean().reshape(1)
        positive = torch.nn.functional.pad((x >= 0).to(torch.uint8), (0, -x.numel() % 8)).reshape(-1, 8)
        return (positive << torch.arange(8, dtype=torch.uint8)).sum(1, dtype=torch.uint8), scale
    levels = 2 ** (bits - 1) - 1
    scale = (x.abs().max() / levels).reshape(1)
    codes = (torch.round(x / scale) if scale.item() > 0 else torch.zeros_like(x)).to(torch.int16) + levels
    codes = codes.to(torch.uint8)
    if bits == 8:
        return codes, scale
    pairs = torch.nn.functional.pad(codes, (0, x.numel() % 2)).reshape(-1, 2)
    return pairs[:, 0] | (pairs[:, 1] << 4), scale


def dequantized(packed: torch.Tensor, scale: torch.Tensor, bits: int, numel: int) -> torch.Tensor:
    """The values :func:`quantized` packed (fp32, ``numel`` of them)."""
    if bits == 1:
        signs = (packed.unsqueeze(1) >> torch.arange(8, dtype=torch.uint8)) & 1
        return (signs.reshape(-1)[:numel].to(torch.float32) * 2 - 1) * scale
    levels = 2 ** (bits - 1) - 1
    codes = packed if bits == 8 else torch.stack([packed & 15, packed >> 4], 1).reshape(-1)[:numel]
    return (codes.to(torch.float32) - levels) * scale
