"""Expert parallelism with the dispatch and combine all-to-alls chunked beside the experts (``overlap_chunks`` > 1).

The runtime form of :func:`plait.cost.chunked.ep_chunked_s` (GEMM+All-to-All of fused computation-collectives,
Punniyamurthy et al., SC 2024; chunked as Wang et al., ASPLOS 2023) for plait's dropless MoE block
(:class:`plait.run.moe.MoeFeedForward`): the assignments each rank sends each expert are split into ``c`` row
ranges, every chunk's dispatch is issued at once (``funcol.all_to_all_single_autograd``, asynchronous until its
result is read), and chunk ``i``'s experts run while the later chunks' dispatches are in flight and the earlier
chunks' combines return. Rows are independent, so the result is the unchunked one. Both sides split a
(source rank, local expert) group of ``n`` rows alike (rows ``n i / c`` to ``n (i + 1) / c``), so the receiver
knows every chunk's split sizes from the one count exchange the unchunked path makes. The backward of each
all-to-all is the reverse all-to-all (funcol's autograd); :class:`_CountBackward` records what it sends.

Legend as :mod:`plait.run.moe`: ``N`` assignments this rank routes, ``R`` rows its experts receive, ``P`` ranks of
the EP group, ``L`` experts per rank, ``D`` width.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from plait.run.chunked import Sent


class _CountBackward(torch.autograd.Function):
    """Identity whose backward records the gradient that the preceding all-to-all's backward sends back."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, sent: Sent, to_others_rows: int) -> torch.Tensor:
        ctx.sent, ctx.rows = sent, to_others_rows
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        row_bytes = grad[0].numel() * grad.element_size() if grad.shape[0] else 0
        ctx.sent.add("all_to_all", grad, ctx.rows * row_bytes)
        return grad, None, None


def _all_to_all(x_RD: torch.Tensor, receive: list[int], send: list[int], group: dist.ProcessGroup, sent: Sent,
                rank: int) -> tuple[torch.Tensor, int]:
    """``funcol.all_to_all_single_autograd`` issued and recorded in ``sent`` (buffer bytes: the send buffer's;
    bytes to others leave out this rank's own rows). Returns the result, still in flight (it waits when read),
    and the rows its backward sends to others, for :class:`_CountBackward` where the result is read."""
    row_bytes = x_RD[0].numel() * x_RD.element_size() if x_RD.shape[0] else 0
    sent.add("all_to_all", x_RD, (sum(send) - send[rank]) * row_bytes)
    return funcol.all_to_all_single_autograd(x_RD, receive, send, group), sum(receive) - receive[rank]


def _ranges(counts_PL: torch.Tensor, i: int, chunks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunk ``i``'s first row and row count within each (rank, expert) group of ``counts_PL`` rows."""
    lo = counts_PL * i // chunks
    return lo, counts_PL * (i + 1) // chunks - lo


def expert_parallel(moe: Any, routed_ND: torch.Tensor, counts_E: torch.Tensor, chunks: int,
                    sent: Sent) -> torch.Tensor:
    """What :meth:`plait.run.moe.MoeFeedForward._expert_parallel` returns, in ``chunks`` chunks."""
    group, ep = moe.ep_group, moe.ep
    per_rank, rank = moe.num_experts // ep, dist.get_rank(group)
    received_E = torch.empty_like(counts_E)
    dist.all_to_all_single(received_E, counts_E, group=group)  # counts only: no gradient
    send_PL, received_PL = counts_E.view(ep, per_rank), received_E.view(ep, per_rank)
    starts_PL = (torch.cumsum(counts_E, 0) - counts_E).view(ep, per_rank)  # routed_ND is sorted by expert
    pieces, rows = [], []
    for i in range(chunks):  # every dispatch issued before any expert runs
        lo_PL, n_PL = _ranges(send_PL, i, chunks)
        index_N = torch.cat([torch.arange(int(s), int(s) + int(n), device=routed_ND.device)
                             for s, n in zip((starts_PL + lo_PL).flatten(), n_PL.flatten())])
        _, got_PL = _ranges(received_PL, i, chunks)
        send, receive = n_PL.sum(1).tolist(), got_PL.sum(1).tolist()
        pieces.append((_all_to_all(routed_ND[index_N], receive, send, group, sent, rank), got_PL, send, receive))
        rows.append(index_N)
    outs = []
    for (dispatched, back_rows), got_PL, send, receive in pieces:  # reading chunk i waits for its dispatch only
        got_RD = _CountBackward.apply(dispatched, sent, back_rows)
        local_R = torch.arange(per_rank, device=counts_E.device).repeat(ep).repeat_interleave(got_PL.flatten())
        by_expert_R = local_R.argsort(stable=True)  # source-rank-major -> expert-major
        y_RD = moe.experts(got_RD[by_expert_R], got_PL.sum(0).tolist())[by_expert_R.argsort()]
        outs.append(_all_to_all(y_RD, send, receive, group, sent, rank))  # in flight while the next chunk computes
    order_N = torch.cat(rows).argsort()
    return torch.cat([_CountBackward.apply(y, sent, back_rows) for y, back_rows in outs])[order_N]
