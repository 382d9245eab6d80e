"""All-to-all (Ulysses) sequence parallelism for causal self-attention on ``torch.distributed`` (any backend).

Legend of shape suffixes: B batch, H heads, h heads per cp rank (``H / cp``), S this rank's positions, T all
positions (``cp S``), E head dim, W cp ranks.

Each cp rank holds a contiguous slice of the sequence. One all-to-all each turns the sequence split of Q, K and V
into a split of the heads, attention runs causally over the whole sequence for ``H / cp`` heads, and one more turns
the output back (DeepSpeed-Ulysses: Jacobs et al. 2023, arXiv:2309.14509, Sec. 3.1); the backward runs the inverse
all-to-alls on the gradients. As in plait's DiT runtime (:func:`plait.workloads.dit.sp_attention.ulysses_attention`),
but over the cp group and with autograd. Each rank sends ``(cp - 1) / cp`` of each of the four tensors per pass:
:func:`plait.cost.context_parallel.cp_sent_bytes` for ``cp_attention = "ulysses"``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F


class Ulysses:
    """One cp group's all-to-all attention and the bytes this rank has sent to its peers."""

    def __init__(self, group: dist.ProcessGroup) -> None:
        self.group = group
        self.rank, self.size = dist.get_rank(group), dist.get_world_size(group)
        self.sent_bytes = 0

    def exchange(self, send_W: torch.Tensor) -> torch.Tensor:
        """``send_W[w]`` goes to rank ``w``; returns ``got[w]`` from rank ``w``."""
        send = send_W.contiguous()
        got = torch.empty_like(send)
        self.sent_bytes += send[0].numel() * send.element_size() * (self.size - 1)  # its own share stays home
        dist.all_to_all_single(got, send, group=self.group)
        return got

    def to_heads(self, x_BHSE: torch.Tensor) -> torch.Tensor:
        """This rank's positions of all heads -> all positions of this rank's heads, ``[B, h, T, E]``."""
        b, heads, s, e = x_BHSE.shape
        got = self.exchange(x_BHSE.reshape(b, self.size, heads // self.size, s, e).transpose(0, 1))
        return got.permute(1, 2, 0, 3, 4).reshape(b, heads // self.size, self.size * s, e)  # got[w]: rank w's positions

    def to_positions(self, x_BhTE: torch.Tensor) -> torch.Tensor:
        """All positions of this rank's heads -> this rank's positions of all heads, ``[B, H, S, E]``."""
        b, h, t, e = x_BhTE.shape
        got = self.exchange(x_BhTE.reshape(b, h, self.size, t // self.size, e).permute(2, 0, 1, 3, 4))
        return got.transpose(0, 1).reshape(b, self.size * h, t // self.size, e)  # got[w]: rank w's heads

    def attention(self, q_BHSE: torch.Tensor, k_BHSE: torch.Tensor, v_BHSE: torch.Tensor) -> torch.Tensor:
        """Causal attention of this rank's positions over the whole (contiguously sharded) sequence."""
        q, k, v = (_Exchange.apply(t, self, True) for t in (q_BHSE, k_BHSE, v_BHSE))
        o_BhTE = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return _Exchange.apply(o_BhTE, self, False)  # type: ignore[no-any-return]


class _Exchange(torch.autograd.Function):
    """An all-to-all whose backward is the inverse all-to-all of the gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, ulysses: Ulysses, heads: bool) -> torch.Tensor:
        ctx.ulysses, ctx.heads = ulysses, heads
        return ulysses.to_heads(x) if heads else ulysses.to_positions(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        ulysses = ctx.ulysses
        return (ulysses.to_positions(grad) if ctx.heads else ulysses.to_heads(grad)), None, None
