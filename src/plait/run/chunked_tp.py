"""Tensor-parallel transformer blocks whose collectives run chunked beside their GEMMs (``plan.overlap_chunks`` > 1).

Megatron's TP (Shoeybi et al. 2019), with sequence parallelism as Korthikanti et al. 2022 (Sec. 4.2.2), each block's
collective fused with the GEMMs beside it as :mod:`plait.run.chunked`'s primitives (fused computation-collectives,
Punniyamurthy et al., SC 2024; chunked as Wang et al., ASPLOS 2023):

- q/k/v and the MLP's gate/up (column-parallel): with sequence parallelism the block's input is all-gathered chunk
  by chunk while the previous chunk multiplies (:func:`~plait.run.chunked.all_gather_matmuls`); the backward of
  that all-gather is the input gradient's reduce-scatter, chunked beside its GEMM
  (:func:`~plait.run.chunked.matmul_reduce_scatter`). Without sequence parallelism the forward has no collective
  and the backward all-reduces the input gradient (Megatron's ``f``), chunked
  (:func:`~plait.run.chunked.matmul_all_reduce`).
- the attention output and the MLP's down projection (row-parallel): partial sums reduce-scattered over the
  sequence (all-reduced without sequence parallelism, Megatron's ``g``), chunked; the backward of a reduce-scatter
  is the all-gather of the output gradient, chunked beside the input gradient's GEMM; that of an all-reduce none.

The weights stay DTensors sharded as ``ColwiseParallel``/``RowwiseParallel`` shard them (``Shard(0)``/``Shard(1)``,
a row-parallel bias ``Replicate``), so clipping, FSDP2 and checkpoints see the same parameters as DTensor's TP;
the blocks compute on their local shards (``to_local``). Norms run on sequence shards under DTensor's
``SequenceParallel``. Only dense blocks run here: an MoE block chunks its expert all-to-alls instead
(:mod:`plait.run.chunked_moe`), and plait refuses MoE with tp > 1 (``data/engines.toml``).

Rows: a block's hidden states ``[B, S, D]`` enter the primitives as ``S x B`` rows (sequence-major), so the rows of
a sequence shard are one contiguous rank-major block, as Megatron-LM's ``[s, b, h]`` layout keeps them. Legend:
``B`` batch, ``S`` sequence (``s = S / tp`` one rank's shard), ``D`` width, ``M``/``m`` rows of the group/rank,
``K`` inner and ``N`` output columns of a GEMM (the local shard's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from plait.plan.plan import Plan
from plait.run.chunked import Sent, all_gather_matmuls, matmul_all_reduce, matmul_reduce_scatter
from plait.run.model import Attention, Block, FeedForward, apply_rope
from plait.run.moe import MoeFeedForward


@dataclass(frozen=True, eq=False)
class ChunkedTP:
    """What a chunked block needs: its chunk count, sequence parallelism, the TP group and the rank's ledger."""

    chunks: int
    """``plan.overlap_chunks`` (fewer where a rank's rows are fewer)."""
    sp: bool
    """Sequence parallelism: all-gather and reduce-scatter (else all-reduces)."""
    group: dist.ProcessGroup
    """The tensor-parallel ranks."""
    sent: Sent
    """Every collective the rank's chunked blocks issue, forward and backward."""


def _compute_dtype(x: torch.Tensor, w: torch.Tensor) -> torch.dtype:
    """The GEMMs' dtype: autocast's where it is on (FSDP2 casts the weights itself), else the weights'."""
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else w.dtype


class _GatherLinear(torch.autograd.Function):
    """Column-parallel GEMMs sharing one input: ``gather(x) @ w_i.T`` (``gather``: the identity without SP)."""

    @staticmethod
    def forward(ctx: Any, x_mK: torch.Tensor, tp: ChunkedTP, *w_NK: torch.Tensor) -> tuple[torch.Tensor, ...]:
        dtype = _compute_dtype(x_mK, w_NK[0])
        with torch.autocast(x_mK.device.type, enabled=False):  # the dtypes are explicit here and in backward
            ws_KN = [w.to(dtype).t() for w in w_NK]
            if tp.sp:
                outs, x_MK = all_gather_matmuls(x_mK, ws_KN, min(tp.chunks, x_mK.shape[0]), tp.sent, tp.group)
            else:
                x_MK = x_mK
                outs = [x_MK.to(dtype) @ w for w in ws_KN]
        ctx.tp, ctx.dtype, ctx.x_dtype = tp, dtype, x_mK.dtype
        ctx.save_for_backward(x_MK, *w_NK)
        return tuple(outs)

    @staticmethod
    def backward(ctx: Any, *g_MN: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        tp, dtype = ctx.tp, ctx.dtype
        x_MK, *w_NK = ctx.saved_tensors
        g_MN = tuple(g.to(dtype) for g in g_MN)
        g_MF = torch.cat(g_MN, dim=1)  # every GEMM's output gradient against its weight, summed in one GEMM
        w_FK = torch.cat([w.to(dtype) for w in w_NK], dim=0)
        if tp.sp:  # the all-gather's backward: the input gradient reduce-scattered, in the input's dtype
            gx = matmul_reduce_scatter(g_MF, w_FK, min(tp.chunks, x_MK.shape[0] // dist.get_world_size(tp.group)),
                                       tp.sent, tp.group, ctx.x_dtype)
        else:  # Megatron's f: identity forward, all-reduce backward
            gx = matmul_all_reduce(g_MF, w_FK, min(tp.chunks, g_MF.shape[0]), tp.sent, tp.group).to(ctx.x_dtype)
        x = x_MK.to(dtype)
        return (gx, None, *((g.t() @ x).to(w.dtype) for g, w in zip(g_MN, w_NK)))


class _ReduceLinear(torch.autograd.Function):
    """A row-parallel GEMM ``x @ w.T`` whose partial sums are reduce-scattered over the rows (all-reduced without
    SP)."""

    @staticmethod
    def forward(ctx: Any, x_MK: torch.Tensor, tp: ChunkedTP, w_NK: torch.Tensor) -> torch.Tensor:
        dtype = _compute_dtype(x_MK, w_NK)
        with torch.autocast(x_MK.device.type, enabled=False):
            x, w_KN = x_MK.to(dtype), w_NK.to(dtype).t()
            if tp.sp:
                rows = x.shape[0] // dist.get_world_size(tp.group)
                out = matmul_reduce_scatter(x, w_KN, min(tp.chunks, rows), tp.sent, tp.group)
            else:
                out = matmul_all_reduce(x, w_KN, min(tp.chunks, x.shape[0]), tp.sent, tp.group)
        ctx.tp, ctx.dtype = tp, dtype
        ctx.save_for_backward(x_MK, w_NK)
        return out

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        tp, dtype = ctx.tp, ctx.dtype
        x_MK, w_NK = ctx.saved_tensors
        g, w = g.to(dtype), w_NK.to(dtype)
        if tp.sp:  # the reduce-scatter's backward: the output gradient all-gathered beside the input gradient's GEMM
            (gx,), g_MN = all_gather_matmuls(g, [w], min(tp.chunks, g.shape[0]), tp.sent, tp.group)
        else:  # Megatron's g: all-reduce forward, identity backward
            gx, g_MN = g @ w, g
        return gx.to(x_MK.dtype), None, (g_MN.t() @ x_MK.to(dtype)).to(w_NK.dtype)


def _rows(x_BSK: torch.Tensor) -> torch.Tensor:
    """``[B, S, K]`` as ``S x B`` rows (sequence-major)."""
    return x_BSK.transpose(0, 1).reshape(-1, x_BSK.shape[-1])


def _unrows(y_MN: torch.Tensor, batch: int) -> torch.Tensor:
    """``S x B`` rows back to ``[B, S, N]``."""
    return y_MN.view(-1, batch, y_MN.shape[-1]).transpose(0, 1)


def column_parallel(x_BsK: torch.Tensor, linears: Sequence[nn.Linear], tp: ChunkedTP) -> list[torch.Tensor]:
    """``linears`` (column shards) applied to the (gathered) input, each ``[B, S, N_local]``."""
    outs = _GatherLinear.apply(_rows(x_BsK), tp, *(lin.weight.to_local() for lin in linears))
    out = [_unrows(y, x_BsK.shape[0]) for y in outs]
    return [y if lin.bias is None else y + lin.bias.to_local() for y, lin in zip(out, linears)]


def row_parallel(x_BSK: torch.Tensor, linear: nn.Linear, tp: ChunkedTP) -> torch.Tensor:
    """``linear`` (a row shard) with its partial sums reduced: ``[B, s, N]`` with SP, ``[B, S, N]`` without."""
    y = _unrows(_ReduceLinear.apply(_rows(x_BSK), tp, linear.weight.to_local()), x_BSK.shape[0])
    if linear.bias is None:
        return y
    from torch.distributed.tensor import Partial

    # the bias is replicated; with SP each rank adds it to its own rows only, so its gradient is a partial sum
    return y + (linear.bias.to_local(grad_placements=[Partial()]) if tp.sp else linear.bias.to_local())


class ChunkedAttention(Attention):
    """:class:`~plait.run.model.Attention` with chunked TP projections (module docstring); same parameters."""

    tp: ChunkedTP

    def forward(self, x_BSD: torch.Tensor, cos_SE: torch.Tensor, sin_SE: torch.Tensor) -> torch.Tensor:
        q_BSF, k_BSF, v_BSF = column_parallel(x_BSD, (self.wq, self.wk, self.wv), self.tp)
        b, s = q_BSF.shape[:2]
        q_BSHE = q_BSF.reshape(b, s, -1, self.head_dim)
        k_BSKE, v_BSKE = k_BSF.reshape(b, s, -1, self.head_dim), v_BSF.reshape(b, s, -1, self.head_dim)
        if self.rope:
            q_BSHE, k_BSKE = apply_rope(q_BSHE, cos_SE, sin_SE), apply_rope(k_BSKE, cos_SE, sin_SE)
        k_BSHE = k_BSKE.repeat_interleave(self.repeats, dim=2)
        v_BSHE = v_BSKE.repeat_interleave(self.repeats, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q_BSHE, k_BSHE, v_BSHE))
        if self.recompute_core and self.training:  # selective recomputation, as Attention does
            o_BHSE = checkpoint(self._core, q, k, v, use_reentrant=False)
        else:
            o_BHSE = self._core(q, k, v)
        return row_parallel(o_BHSE.transpose(1, 2).reshape(b, s, -1), self.wo, self.tp)


class ChunkedFeedForward(FeedForward):
    """:class:`~plait.run.model.FeedForward` with chunked TP projections (module docstring); same parameters."""

    tp: ChunkedTP

    def forward(self, x_BSD: torch.Tensor) -> torch.Tensor:
        if self.w3 is not None:
            gate_BSF, up_BSF = column_parallel(x_BSD, (self.w1, self.w3), self.tp)
            return row_parallel(F.silu(gate_BSF) * up_BSF, self.w2, self.tp)
        (up_BSF,) = column_parallel(x_BSD, (self.w1,), self.tp)
        return row_parallel(F.gelu(up_BSF), self.w2, self.tp)


def apply_chunked_tp(block: Block, tp_mesh: Any, plan: Plan, sent: Sent) -> None:
    """Shard ``block``'s projections as DTensor's TP plan does and make its attention and MLP chunked (their
    classes become the chunked subclasses: the parameters, their names and initial values stay as they are)."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import SequenceParallel, parallelize_module

    attention, mlp = block.attention, block.feed_forward
    assert type(attention) is Attention and type(mlp) is FeedForward, "dense blocks only (MoE with tp > 1 is refused)"

    def shard(linear: nn.Linear | None, weight: Any, bias: Any) -> None:
        if linear is None:
            return
        linear.weight = nn.Parameter(distribute_tensor(linear.weight.data, tp_mesh, [weight]))
        if linear.bias is not None:
            linear.bias = nn.Parameter(distribute_tensor(linear.bias.data, tp_mesh, [bias]))

    for linear in (attention.wq, attention.wk, attention.wv, mlp.w1, mlp.w3):
        shard(linear, Shard(0), Shard(0))
    for linear in (attention.wo, mlp.w2):
        shard(linear, Shard(1), Replicate())
    if plan.sp:  # norms on sequence shards; their weights' gradients are partial sums (reduced once per step)
        norm = SequenceParallel(use_local_output=True)
        parallelize_module(block, tp_mesh, {"attention_norm": norm, "ffn_norm": norm})  # type: ignore[arg-type]
    tp = ChunkedTP(chunks=plan.overlap_chunks, sp=plan.sp, group=tp_mesh.get_group(), sent=sent)
    attention.__class__, mlp.__class__ = ChunkedAttention, ChunkedFeedForward
    attention.tp = mlp.tp = tp  # type: ignore[attr-defined]


def sent_bytes(parts: Sequence[nn.Module]) -> tuple[int, int] | None:
    """(messages, buffer bytes) the chunked collectives of ``parts`` have issued so far, TP blocks' and experts'
    all-to-alls (``None``: nothing runs chunked)."""
    ledgers = {id(m.tp.sent): m.tp.sent for part in parts for m in part.modules() if isinstance(m, ChunkedAttention)}
    ledgers.update({id(m.chunked[1]): m.chunked[1] for part in parts for m in part.modules()
                    if isinstance(m, MoeFeedForward) and m.chunked is not None})
    if not ledgers:
        return None
    return sum(s.messages for s in ledgers.values()), sum(s.buffer_bytes for s in ledgers.values())
