"""Chunked computation-collectives on ``torch.distributed``: each chunk's collective in flight while the next computes.

The runtime form of :mod:`plait.cost.chunked` (fused computation-collectives, Punniyamurthy et al., SC 2024, arXiv
2305.06942, at the granularity of whole chunks rather than workgroups): the rows of an operation are split into
``chunks`` slices, each slice's collective is issued with ``async_op=True`` as soon as its operand is ready, and
the next slice computes while it runs. Every primitive returns what its unchunked form returns (rows are
independent, so only the order of the work changes) and records each collective it issues in a :class:`Sent`:
chunking multiplies the messages by ``chunks`` and leaves the bytes as they were.

- :func:`all_gather_matmul`: sequence-parallel all-gather of the rows, then the column-parallel GEMM
  (:func:`all_gather_matmuls`: one gather feeding several GEMMs).
- :func:`matmul_reduce_scatter`: the row-parallel GEMM's partial sums reduce-scattered over the rows.
- :func:`matmul_all_reduce`: the row-parallel GEMM's partial sums all-reduced (the paper's GEMV+AllReduce).
- :func:`expert_all_to_all`: dispatch all-to-all, the rank's expert GEMM, combine all-to-all (GEMM+All-to-All).
- :func:`lookup_all_to_all`: table-wise pooled embedding lookups sent to the samples' ranks (embedding+All-to-All).

Written with ``torch.distributed`` primitives rather than PyTorch's fused symmetric-memory ops
(``_fused_all_gather_matmul``), which need CUDA; these run on gloo. Shapes: ``M`` rows (tokens or samples) of the
whole group, ``m = M / g`` of one rank, ``K`` inner, ``N`` output columns, ``g`` ranks, ``B`` samples of one rank.

The TP primitives take the tensor-parallel ``group`` (default: every rank); :mod:`plait.run.chunked_tp` runs them
inside the transformer blocks, each forward primitive's backward being another of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn


@dataclass
class Sent:
    """Collectives one rank issued: how many, and their buffers' bytes as :mod:`plait.cost.collectives` sizes them
    (the gathered or reduced buffer for all-gather, reduce-scatter and all-reduce; the send buffer for an
    all-to-all), plus the all-to-alls' bytes to other ranks (what :mod:`plait.workloads.dlrm.cost` counts)."""

    messages: int = 0
    buffer_bytes: int = 0
    to_others_bytes: int = 0
    kinds: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, t: torch.Tensor, to_others: int = 0) -> None:
        self.messages += 1
        self.buffer_bytes += t.numel() * t.element_size()
        self.to_others_bytes += to_others
        self.kinds[kind] = self.kinds.get(kind, 0) + 1


def _bounds(rows: int, chunks: int) -> list[tuple[int, int]]:
    """``chunks`` contiguous row ranges covering ``rows`` (the first ones a row longer when it does not divide)."""
    if not 1 <= chunks <= max(rows, 1):
        raise ValueError(f"chunks={chunks} must be in 1..{rows} (the rows to split)")
    edges = [rows * i // chunks for i in range(chunks + 1)]
    return list(zip(edges[:-1], edges[1:]))


def all_gather_matmul(x_mK: torch.Tensor, w_KN: torch.Tensor, chunks: int, sent: Sent,
                      group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """``all_gather(x) @ w`` (rank-major rows, ``M x N``) with chunk ``i + 1`` gathered while chunk ``i`` multiplies."""
    return all_gather_matmuls(x_mK, [w_KN], chunks, sent, group)[0][0]


def all_gather_matmuls(x_mK: torch.Tensor, ws_KN: list[torch.Tensor], chunks: int, sent: Sent,
                       group: dist.ProcessGroup | None = None) -> tuple[list[torch.Tensor], torch.Tensor]:
    """``all_gather(x) @ w`` for each of ``ws_KN`` (one gather feeds them all, as q/k/v or gate/up share a block's
    input), chunk ``i + 1`` gathered while chunk ``i`` multiplies; also returns the gathered rows (``M x K``, in
    ``x``'s dtype: a weight gradient needs them). Each chunk is cast to the weights' dtype before its GEMMs."""
    g, m = dist.get_world_size(group), x_mK.shape[0]
    outs_MN = [x_mK.new_empty(g * m, w.shape[1], dtype=w.dtype) for w in ws_KN]
    x_MK = x_mK.new_empty(g * m, x_mK.shape[1])
    parts = _bounds(m, chunks)

    def start(i: int) -> tuple[torch.Tensor, dist.Work]:
        lo, hi = parts[i]
        buf = x_mK.new_empty(g * (hi - lo), x_mK.shape[1])
        sent.add("all_gather", buf)
        return buf, dist.all_gather_into_tensor(buf, x_mK[lo:hi].contiguous(), group=group, async_op=True)

    pending = start(0)
    for i, (lo, hi) in enumerate(parts):
        buf, work = pending
        if i + 1 < len(parts):
            pending = start(i + 1)
        work.wait()
        x_MK.view(g, m, -1)[:, lo:hi] = buf.view(g, hi - lo, -1)
        for w_KN, out_MN in zip(ws_KN, outs_MN):
            out_MN.view(g, m, -1)[:, lo:hi] = (buf.to(w_KN.dtype) @ w_KN).view(g, hi - lo, -1)
    return outs_MN, x_MK


def matmul_reduce_scatter(x_MK: torch.Tensor, w_KN: torch.Tensor, chunks: int, sent: Sent,
                          group: dist.ProcessGroup | None = None, dtype: torch.dtype | None = None) -> torch.Tensor:
    """This rank's rows of ``reduce_scatter(x @ w)`` (``m x N``), chunk ``i``'s reduce-scatter running while chunk
    ``i + 1`` multiplies; ``dtype``: the partial sums are cast to it before they are reduced (default ``x``'s)."""
    g = dist.get_world_size(group)
    m = x_MK.shape[0] // g
    out_mN = x_MK.new_empty(m, w_KN.shape[1], dtype=dtype or x_MK.dtype)
    works = []
    for lo, hi in _bounds(m, chunks):  # chunk: rows lo..hi of every rank's block, rank-major
        y = (x_MK.view(g, m, -1)[:, lo:hi].reshape(g * (hi - lo), -1) @ w_KN).to(out_mN.dtype).contiguous()
        piece = out_mN.new_empty(hi - lo, w_KN.shape[1])
        sent.add("reduce_scatter", y)
        works.append((dist.reduce_scatter_tensor(piece, y, group=group, async_op=True), piece, lo, hi))
    for work, piece, lo, hi in works:
        work.wait()
        out_mN[lo:hi] = piece
    return out_mN


def matmul_all_reduce(x_MK: torch.Tensor, w_KN: torch.Tensor, chunks: int, sent: Sent,
                      group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """``all_reduce(x @ w)`` (``M x N``), each chunk's all-reduce running while the next chunk multiplies."""
    out_MN = x_MK.new_empty(x_MK.shape[0], w_KN.shape[1])
    works = []
    for lo, hi in _bounds(x_MK.shape[0], chunks):
        torch.matmul(x_MK[lo:hi], w_KN, out=out_MN[lo:hi])
        sent.add("all_reduce", out_MN[lo:hi])
        works.append(dist.all_reduce(out_MN[lo:hi], group=group, async_op=True))
    for work in works:
        work.wait()
    return out_MN


def expert_all_to_all(x_gmK: torch.Tensor, w_KN: torch.Tensor, chunks: int, sent: Sent) -> torch.Tensor:
    """Rows ``x[r]`` go to rank ``r``'s expert ``w`` and come back multiplied (``g x m x N``): per chunk of ``m``, a
    dispatch all-to-all, the GEMM and a combine all-to-all, chunk ``i + 1`` dispatched while chunk ``i``
    multiplies and its combine runs."""
    g, m = x_gmK.shape[0], x_gmK.shape[1]
    out_gmN = x_gmK.new_empty(g, m, w_KN.shape[1])
    parts = _bounds(m, chunks)

    def dispatch(i: int) -> tuple[torch.Tensor, dist.Work]:
        lo, hi = parts[i]
        send = x_gmK[:, lo:hi].contiguous()
        got = torch.empty_like(send)
        sent.add("all_to_all", send, send[0].numel() * send.element_size() * (g - 1))
        return got, dist.all_to_all_single(got, send, async_op=True)

    pending, combines = dispatch(0), []
    for i, (lo, hi) in enumerate(parts):
        got, work = pending
        if i + 1 < len(parts):
            pending = dispatch(i + 1)
        work.wait()
        y = (got @ w_KN).contiguous()
        back = torch.empty_like(y)
        sent.add("all_to_all", y, y[0].numel() * y.element_size() * (g - 1))
        combines.append((dist.all_to_all_single(back, y, async_op=True), back, lo, hi))
    for work, back, lo, hi in combines:
        work.wait()
        out_gmN[:, lo:hi] = back
    return out_gmN


def lookup_all_to_all(bags: list[nn.EmbeddingBag], ids: list[torch.Tensor], chunks: int, sent: Sent) -> torch.Tensor:
    """Table-wise pooled lookups: this rank holds ``bags`` and ``ids[t]`` (``g*B x p_t``, sample-major over the
    group's ranks) of each; returns the pooled embeddings of this rank's ``B`` samples from every rank's tables
    (``g x B x D``, ``D`` the summed widths of one rank's tables, equal on every rank). A slice of ``B`` samples per
    destination is looked up while the previous slice's all-to-all runs."""
    g = dist.get_world_size()
    b = ids[0].shape[0] // g
    width = sum(bag.embedding_dim for bag in bags)
    out_gBD = torch.empty(g, b, width)
    works = []
    for lo, hi in _bounds(b, chunks):
        pooled = [bag(t.view(g, b, -1)[:, lo:hi].reshape(g * (hi - lo), -1)) for bag, t in zip(bags, ids)]
        send = torch.cat(pooled, dim=1).view(g, hi - lo, width)  # destination-major: rank r's samples lo..hi
        got = torch.empty_like(send)
        sent.add("all_to_all", send, send[0].numel() * send.element_size() * (g - 1))
        works.append((dist.all_to_all_single(got, send, async_op=True), got, lo, hi))
    for work, got, lo, hi in works:
        work.wait()
        out_gBD[:, lo:hi] = got
    return out_gBD
