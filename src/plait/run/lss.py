"""LSS segment-parallel causal self-attention on ``torch.distributed`` (any backend, gloo included).

Legend of shape suffixes: B batch, H heads, K K/V heads (``H / repeats``), S this rank's positions, T all
positions (``cp S``), E head dim, F K and V side by side (``2 E``), W cp ranks.

LSS Transformer (Wang et al. 2023, "Ultra-Long Sequence Distributed Transformer", arXiv:2311.02382, abstract
and Fig. 1(v)): each rank holds a segment of the sequence and computes the self-attention of its own queries over
the keys and values of every segment. The keys and values travel in one fused communication: K and V side by side in
one all-gather, not one collective each; the backward is its adjoint, one reduce-scatter of the gathered K/V
gradients, each rank receiving the sum for its own segment. The output of a segment stays on its rank (no partial
attention is aggregated), and the parameter gradients are averaged over the sequence- and data-parallel ranks in
one step by plait's data parallelism over dp x cp (:mod:`plait.run.context`: the paper's double gradient averaging).

plait keeps the ring's head-tail segments (:func:`plait.run.context.positions`: chunks ``r`` and ``2 cp - 1 - r``)
so every rank does the same causal work; the paper's segments are contiguous, which leaves the last rank about
``2 - 1 / cp`` times the mean causal work. K/V travel with their own heads, not copied out to the query heads
(grouped-query attention). Each rank sends ``cp - 1`` K/V blocks each way:
:func:`plait.cost.context_parallel.cp_sent_bytes` for ``cp_attention = "lss"``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F


class Lss:
    """One cp group's fused K/V exchange and the bytes this rank has sent to its peers."""

    def __init__(self, group: dist.ProcessGroup, positions_WS: torch.Tensor) -> None:
        self.group = group
        self.rank, self.size = dist.get_rank(group), dist.get_world_size(group)
        self.positions_WS = positions_WS
        """The sequence positions each cp rank holds, row ``w`` for rank ``w``."""
        self.sent_bytes = 0

    def gather(self, kv_BHSF: torch.Tensor) -> torch.Tensor:
        """Every rank's K/V block, ``[W, B, H, S, F]``: a ring all-gather sends ``cp - 1`` blocks per rank."""
        send = kv_BHSF.contiguous()
        got = [torch.empty_like(send) for _ in range(self.size)]
        self.sent_bytes += send.numel() * send.element_size() * (self.size - 1)
        dist.all_gather(got, send, group=self.group)
        return torch.stack(got)

    def reduce_scatter(self, grad_WBHSF: torch.Tensor) -> torch.Tensor:
        """The sum over ranks of the gradient of this rank's block. gloo has no reduce-scatter, so it runs as an
        all-to-all of the blocks and a local sum: each rank sends ``cp - 1`` blocks, as a ring reduce-scatter does."""
        send = grad_WBHSF.contiguous()
        got = torch.empty_like(send)
        self.sent_bytes += send[0].numel() * send.element_size() * (self.size - 1)  # its own block stays home
        dist.all_to_all_single(got, send, group=self.group)
        return got.sum(0)

    def attention(self, q_BHSE: torch.Tensor, k_BHSE: torch.Tensor, v_BHSE: torch.Tensor,
                  repeats: int = 1) -> torch.Tensor:
        """Causal attention of this rank's queries over the keys of every segment, gathered in one exchange.

        ``repeats``: how many query heads share one K/V head (the model hands K/V copied out to every query head,
        ``repeat_interleave``): only one copy of each travels and is kept, and SDPA shares it among its query heads
        (``enable_gqa``). Exact: the gradients of the copies are summed into the one sent back."""
        e = k_BHSE.shape[-1]
        kv_BKSF = torch.cat([k_BHSE[:, ::repeats], v_BHSE[:, ::repeats]], dim=-1)  # K = H / repeats heads
        kv_WBKSF = _FusedGather.apply(kv_BKSF, self)
        w, b, kv_heads, s, f = kv_WBKSF.shape
        kv_BKTF = kv_WBKSF.permute(1, 2, 0, 3, 4).reshape(b, kv_heads, w * s, f)  # keys in rank order
        keys_T = self.positions_WS.reshape(-1).to(q_BHSE.device)
        queries_S = self.positions_WS[self.rank].to(q_BHSE.device)
        visible_ST = keys_T[None, :] <= queries_S[:, None]  # causal on the positions, whatever their order
        return F.scaled_dot_product_attention(q_BHSE, kv_BKTF[..., :e], kv_BKTF[..., e:], attn_mask=visible_ST,
                                              enable_gqa=repeats > 1)


class _FusedGather(torch.autograd.Function):
    """The K/V all-gather whose backward is the reduce-scatter of the gathered gradients."""

    @staticmethod
    def forward(ctx: Any, kv_BHSF: torch.Tensor, lss: Lss) -> torch.Tensor:
        ctx.lss = lss
        return lss.gather(kv_BHSF)

    @staticmethod
    def backward(ctx: Any, grad_WBHSF: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        return ctx.lss.reduce_scatter(grad_WBHSF), None
