"""A transformer layer on a 2-D (SUMMA) or 2.5-D (Tesseract) tensor-parallel grid, on torch.distributed primitives.

The layout and the collectives are :mod:`plait.cost.tp2d`'s (ColossalAI's ``parallel_2d``/``parallel_2p5d``
layers, read, not copied): rank ``(z, i, j)`` of ``d`` grids of ``q x q`` holds the activation block
``X_ij [T/(q d), k/q]`` (sequences ``z*q + i`` of the batch, width slice ``j``) and the weight block
``W_ij [k/q, n/q]``. Every linear layer is SUMMA: ``q`` steps of a broadcast along rows and one along columns
(forward), broadcasts and reduces (backward), written with ``dist.broadcast``/``dist.reduce`` because
torch.distributed has no SUMMA (DTensor's 2-D sharding of a matmul redistributes whole operands instead).
Each step waits for its blocks (ColossalAI prefetches the next step's; the bytes are the same).

The layer: RMSNorm, fused q/k/v projection (its output columns ordered so that column ``j`` holds heads slice
``j`` of q, k and v), causal attention over the rank's sequences and heads, output projection, RMSNorm, gated
MLP (gate and up interleaved per column the same way), residual adds, and rotary embedding of q and k when given
the tables (a rank holds whole sequences, so positions are the one-process model's). Legend: ``T`` tokens of the
rank's sequences, ``K``/``N`` a linear's local input and output widths, ``B`` sequences, ``S`` sequence length,
``H`` local heads, ``E`` head dim.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from plait.run.model import apply_rope


@dataclass
class Grid:
    """This rank's place in the grid, its process groups and the bytes it has handed to them."""

    q: int
    d: int
    z: int
    i: int
    j: int
    base: int
    """Global rank of grid position (0, 0, 0)."""
    groups: dict[str, Any]
    """``row``, ``col`` and ``depth`` process groups of this rank."""
    counted: dict[tuple[str, str], int] = field(default_factory=dict)
    """Payload bytes per ``(group, kind)`` this rank took part in (sender or receiver)."""

    def rank(self, z: int, i: int, j: int) -> int:
        """Global rank of grid position ``(z, i, j)`` (column fastest, then row, then depth)."""
        return self.base + z * self.q * self.q + i * self.q + j

    def count(self, group: str, kind: str, tensor: torch.Tensor) -> None:
        key = (group, kind)
        self.counted[key] = self.counted.get(key, 0) + tensor.numel() * tensor.element_size()

    def broadcast(self, tensor: torch.Tensor, src: int, group: str) -> None:
        self.count(group, "broadcast", tensor)
        dist.broadcast(tensor, src=src, group=self.groups[group])

    def reduce(self, tensor: torch.Tensor, dst: int, group: str) -> None:
        self.count(group, "reduce", tensor)
        dist.reduce(tensor, dst=dst, group=self.groups[group])

    def all_reduce(self, tensor: torch.Tensor, group: str) -> None:
        self.count(group, "all_reduce", tensor)
        dist.all_reduce(tensor, group=self.groups[group])


def make_grid(q: int, d: int, base: int = 0) -> Grid:
    """The grid of ranks ``base .. base + q*q*d - 1`` (every rank of the job calls this: ``new_group`` is
    collective)."""
    rank = dist.get_rank() - base
    z, rest = divmod(rank, q * q)
    i, j = divmod(rest, q)
    groups: dict[str, Any] = {}
    for zz in range(d):
        for a in range(q):
            row = dist.new_group([base + zz * q * q + a * q + b for b in range(q)])
            col = dist.new_group([base + zz * q * q + b * q + a for b in range(q)])
            if (zz, a) == (z, i):
                groups["row"] = row
            if (zz, a) == (z, j):
                groups["col"] = col
    for a in range(q * q if d > 1 else 0):  # a 2-D grid has no depth group
        depth = dist.new_group([base + zz * q * q + a for zz in range(d)])
        if a == rest:
            groups["depth"] = depth
    return Grid(q=q, d=d, z=z, i=i, j=j, base=base, groups=groups)


def _copy(t: torch.Tensor) -> torch.Tensor:
    """A contiguous buffer holding ``t``, for a collective to send from or receive into."""
    return t.clone(memory_format=torch.contiguous_format)


def summa_ab(grid: Grid, x_TK: torch.Tensor, w_KN: torch.Tensor) -> torch.Tensor:
    """``Y = X W``: at step ``l`` column ``l`` broadcasts ``X_il`` along the row, row ``l`` ``W_lj`` along the
    column (van de Geijn & Watts 1997)."""
    y_TN = x_TK.new_zeros(x_TK.shape[0], w_KN.shape[1])
    for step in range(grid.q):
        a, b = _copy(x_TK), _copy(w_KN)
        grid.broadcast(a, grid.rank(grid.z, grid.i, step), "row")
        grid.broadcast(b, grid.rank(grid.z, step, grid.j), "col")
        y_TN += a @ b
    return y_TN


def summa_abt(grid: Grid, dy_TN: torch.Tensor, w_KN: torch.Tensor) -> torch.Tensor:
    """``dX = dY W^T``: row ``l`` broadcasts ``W_lj`` along the column, the partial ``dX_il`` is reduced along the
    row to column ``l``."""
    out_TK = None
    for step in range(grid.q):
        b = _copy(w_KN)
        grid.broadcast(b, grid.rank(grid.z, step, grid.j), "col")
        part = (dy_TN @ b.T).contiguous()
        grid.reduce(part, grid.rank(grid.z, grid.i, step), "row")
        if step == grid.j:
            out_TK = part
    assert out_TK is not None
    return out_TK


def summa_atb(grid: Grid, x_TK: torch.Tensor, dy_TN: torch.Tensor) -> torch.Tensor:
    """``dW = X^T dY``: column ``l`` broadcasts ``X_il`` along the row, the partial ``dW_lj`` is reduced along the
    column to row ``l``."""
    out_KN = None
    for step in range(grid.q):
        a = _copy(x_TK)
        grid.broadcast(a, grid.rank(grid.z, grid.i, step), "row")
        part = (a.T @ dy_TN).contiguous()
        grid.reduce(part, grid.rank(grid.z, step, grid.j), "col")
        if step == grid.i:
            out_KN = part
    assert out_KN is not None
    return out_KN


class _Summa(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x_TK: torch.Tensor, w_KN: torch.Tensor, grid: Grid) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(x_TK, w_KN)
        ctx.grid = grid
        return summa_ab(grid, x_TK, w_KN)

    @staticmethod
    def backward(ctx: Any, dy_TN: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:  # type: ignore[override]
        x_TK, w_KN = ctx.saved_tensors
        dy_TN = dy_TN.contiguous()
        return summa_abt(ctx.grid, dy_TN, w_KN), summa_atb(ctx.grid, x_TK, dy_TN), None


class _RowSum(torch.autograd.Function):
    """Sum over the row group forward; the gradient likewise summed (each rank's input feeds every rank's sum)."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor, grid: Grid) -> torch.Tensor:  # type: ignore[override]
        ctx.grid = grid
        out = t.clone()
        grid.all_reduce(out, "row")
        return out

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        out = g.contiguous().clone()
        ctx.grid.all_reduce(out, "row")
        return out, None


def linear(grid: Grid, x_TK: torch.Tensor, w_KN: torch.Tensor) -> torch.Tensor:
    """A SUMMA linear layer with its backward."""
    return _Summa.apply(x_TK, w_KN, grid)  # type: ignore[no-any-return]


def rms_norm(grid: Grid, x_TK: torch.Tensor, w_K: torch.Tensor, width: int, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over a width split along the row: the per-token sum of squares summed over the row."""
    squares_T1 = _RowSum.apply((x_TK * x_TK).sum(-1, keepdim=True), grid)
    return x_TK * torch.rsqrt(squares_T1 / width + eps) * w_K


@dataclass(frozen=True)
class LayerShape:
    """The layer's sizes (whole, not split)."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int


def layer_forward(grid: Grid, shape: LayerShape, seqs: int, x_TK: torch.Tensor, params: dict[str, torch.Tensor],
                  rope: tuple[torch.Tensor, torch.Tensor] | None = None, eps: float = 1e-6) -> torch.Tensor:
    """One layer on the grid: ``x_TK`` is this rank's ``[seqs * S, hidden/q]`` block; ``params`` its blocks
    (:func:`grid_blocks`); ``rope``: the ``(cos, sin)`` tables of :func:`plait.run.model.rope_tables`, applied
    to the rank's heads at their positions as the one-process model does (a rank holds whole sequences)."""
    q, e = grid.q, shape.head_dim
    heads, kv = shape.heads // q, shape.kv_heads // q
    qkv = linear(grid, rms_norm(grid, x_TK, params["norm1"], shape.hidden, eps), params["wqkv"])
    q_, k_, v_ = qkv.split([heads * e, kv * e, kv * e], dim=-1)

    def split(t: torch.Tensor, n: int, rotate: bool) -> torch.Tensor:  # [T, n*E] -> [B, n, S, E]
        t_BSNE = t.reshape(seqs, -1, n, e)
        if rotate and rope is not None:
            t_BSNE = apply_rope(t_BSNE, *rope)
        return t_BSNE.transpose(1, 2)

    q_BHSE, k_BHSE, v_BHSE = split(q_, heads, True), split(k_, kv, True), split(v_, kv, False)
    k_BHSE, v_BHSE = (t.repeat_interleave(heads // kv, dim=1) for t in (k_BHSE, v_BHSE))
    attn_BHSE = F.scaled_dot_product_attention(q_BHSE, k_BHSE, v_BHSE, is_causal=True)
    attn_TK = attn_BHSE.transpose(1, 2).reshape(x_TK.shape[0], heads * e)
    h_TK = x_TK + linear(grid, attn_TK, params["wo"])
    gate, up = linear(grid, rms_norm(grid, h_TK, params["norm2"], shape.hidden, eps), params["wup"]).chunk(2, dim=-1)
    return h_TK + linear(grid, F.silu(gate) * up, params["wdown"])


def reference_forward(shape: LayerShape, x_BSK: torch.Tensor, full: dict[str, torch.Tensor]) -> torch.Tensor:
    """The same layer in one process (``full``: unsplit weights, q/k/v and gate/up in their plain order)."""
    def norm(t: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return t * torch.rsqrt((t * t).mean(-1, keepdim=True) + 1e-6) * w

    b, s, _ = x_BSK.shape
    e, heads, kv = shape.head_dim, shape.heads, shape.kv_heads
    q_, k_, v_ = (norm(x_BSK, full["norm1"]) @ full["wqkv"]).split([heads * e, kv * e, kv * e], dim=-1)
    q_, k_, v_ = (t.reshape(b, s, -1, e).transpose(1, 2) for t in (q_, k_, v_))
    k_, v_ = (t.repeat_interleave(heads // kv, dim=1) for t in (k_, v_))
    attn = F.scaled_dot_product_attention(q_, k_, v_, is_causal=True).transpose(1, 2).reshape(b, s, heads * e)
    h = x_BSK + attn @ full["wo"]
    gate, up = (norm(h, full["norm2"]) @ full["wup"]).chunk(2, dim=-1)
    return h + (F.silu(gate) * up) @ full["wdown"]


def _interleave(w: torch.Tensor, sizes: list[int], q: int) -> torch.Tensor:
    """Columns of ``w`` (sections of ``sizes``) reordered so that column block ``j`` of ``q`` holds slice ``j`` of
    every section (head-aligned q/k/v, gate/up)."""
    sections = w.split(sizes, dim=-1)
    return torch.cat([part for j in range(q) for part in (s.chunk(q, dim=-1)[j] for s in sections)], dim=-1)


def grid_blocks(grid: Grid, shape: LayerShape, full: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """This rank's blocks of the unsplit weights (the same on every depth slice)."""
    q, e = grid.q, shape.head_dim
    wqkv = _interleave(full["wqkv"], [shape.heads * e, shape.kv_heads * e, shape.kv_heads * e], q)
    wup = _interleave(full["wup"], [shape.ffn, shape.ffn], q)

    def block(w: torch.Tensor) -> torch.Tensor:
        return w.chunk(q, dim=0)[grid.i].chunk(q, dim=1)[grid.j].contiguous()

    return {"norm1": full["norm1"].chunk(q)[grid.j].clone(), "norm2": full["norm2"].chunk(q)[grid.j].clone(),
            "wqkv": block(wqkv), "wo": block(full["wo"]), "wup": block(wup), "wdown": block(full["wdown"])}


def reduce_weight_grads(grid: Grid, params: dict[str, torch.Tensor]) -> None:
    """Complete the weight gradients: a norm's slice was used by every row (summed over the column group) and,
    on a 2.5-D grid, every block by every depth slice (summed over the depth group)."""
    for name in ("norm1", "norm2"):
        grad = params[name].grad
        assert grad is not None
        grid.all_reduce(grad, "col")
    if grid.d > 1:
        for name in ("wqkv", "wo", "wup", "wdown", "norm1", "norm2"):
            grad = params[name].grad
            assert grad is not None
            grid.all_reduce(grad, "depth")
