"""Validity rules of 2-D and 2.5-D tensor-parallel grids (``Plan.tp_mode``; costed in :mod:`plait.cost.tp2d`).

A 2-D grid is ``q x q`` ranks, a 2.5-D one ``d`` such grids (Tesseract, arXiv 2105.14500, as ColossalAI's ``parallel_2p5d`` lays it out): ``tp`` must be
``q*q`` or ``q*q*d`` with ``q >= 2`` (and ``d >= 2``). The grid splits attention heads and the hidden and MLP
widths over its ``q`` columns and the micro-batch's sequences over its ``q*d`` rows and slices (ColossalAI's
``parallel_2d``/``parallel_2p5d`` layers split the batch dimension), so those must divide. plait costs and runs
grids for dense layers with standard attention and without context or expert parallelism or overlapped
(``tp_comm_overlap``, ``overlap_chunks``) collectives.
"""

from __future__ import annotations

import math
from typing import Any

from plait.plan.columns import PlanColumns
from plait.plan.plan import Plan
from plait.workload.model import ModelSpec


def _depth(c: PlanColumns) -> Any:
    return c.xp.where(c.is_("tp_mode", "2.5d"), c["tp_depth"], 1)


def grid_side(c: PlanColumns) -> Any:
    """Per row, ``q`` of the grid (``sqrt(tp / d)`` rounded down; 1-D rows: meaningless)."""
    ratio = c["tp"] // c.xp.maximum(_depth(c), 1)
    if c.xp.scalar:
        return math.isqrt(max(int(ratio), 0))
    import numpy as np  # columns only: a single plan's estimate runs without numpy

    return np.floor(np.sqrt(np.maximum(ratio, 0))).astype(np.int64)


def _grid(c: PlanColumns) -> Any:
    return c.xp.not_(c.is_("tp_mode", "1d"))


def _none_grid(c: PlanColumns) -> bool:
    """Whether no row is a grid (the rules below then skip their per-row work: a search's common case, and a 1-D
    single plan's)."""
    if c.xp.scalar:
        return bool(c["tp_mode"] == 0)
    return not bool((c["tp_mode"] != 0).any())


def bad_shape(c: PlanColumns, m: ModelSpec) -> Any:
    """Rows whose ``tp``, ``tp_mode`` and ``tp_depth`` do not make a grid."""
    if _none_grid(c):
        return c["tp_depth"] != 1
    q, d = grid_side(c), _depth(c)
    flat = c.is_("tp_mode", "1d") & (c["tp_depth"] != 1)
    two = c.is_("tp_mode", "2d") & (c["tp_depth"] != 1)
    deep = c.is_("tp_mode", "2.5d") & (c["tp_depth"] < 2)
    return flat | two | deep | (_grid(c) & ((q < 2) | (q * q * d != c["tp"])))


def shape_message(p: Plan, m: ModelSpec) -> str:
    if p.tp_mode == "1d":
        return f"tp_depth={p.tp_depth} needs tp_mode='2.5d' (1-D tensor parallelism has no depth)"
    if p.tp_mode == "2d":
        if p.tp_depth != 1:
            return f"tp_depth={p.tp_depth} needs tp_mode='2.5d' (a 2-D grid has depth 1)"
        return f"tp_mode='2d' needs tp = q*q with q >= 2 (tp={p.tp})"
    if p.tp_depth < 2:
        return f"tp_mode='2.5d' needs tp_depth >= 2 (got {p.tp_depth}; depth 1 is tp_mode='2d')"
    return f"tp_mode='2.5d' needs tp = q*q*tp_depth with q >= 2 (tp={p.tp}, tp_depth={p.tp_depth})"


def bad_split(c: PlanColumns, m: ModelSpec) -> Any:
    """Grid rows whose ``q`` does not divide the heads or widths, or ``q*d`` the micro-batch."""
    if _none_grid(c):
        return c.full(False)
    q = c.xp.maximum(grid_side(c), 1)
    widths = (m.num_heads % q) | (m.num_kv_heads % q) | (m.hidden_size % q) | (m.ffn_hidden_size % q)
    return _grid(c) & ((widths != 0) | (c["micro_batch"] % (q * _depth(c)) != 0))


def split_message(p: Plan, m: ModelSpec) -> str:
    d = p.tp_depth if p.tp_mode == "2.5d" else 1
    q = math.isqrt(p.tp // d)
    for name in ("num_heads", "num_kv_heads", "hidden_size", "ffn_hidden_size"):
        if getattr(m, name) % q:
            return f"tp_mode={p.tp_mode!r} splits {name}={getattr(m, name)} over q={q} grid columns: q must divide it"
    return (f"tp_mode={p.tp_mode!r} splits the micro-batch's sequences over q*d={q * d} grid rows: "
            f"micro_batch={p.micro_batch} must be divisible by {q * d}")


def bad_scope(c: PlanColumns, m: ModelSpec) -> Any:
    """Grid rows outside what plait costs and runs as a grid."""
    if _none_grid(c):
        return c.full(False)
    special = bool(m.moe or m.mla)
    overlapped = c["tp_comm_overlap"] | (c["overlap_chunks"] > 1)  # the grid's collectives are costed unoverlapped
    return _grid(c) & (c.full(special) | (c["cp"] > 1) | (c["ep"] > 1) | overlapped)


def scope_message(p: Plan, m: ModelSpec) -> str:
    what = ("a mixture-of-experts model" if m.moe else "multi-head latent attention" if m.mla
            else f"cp={p.cp}" if p.cp > 1 else f"ep={p.ep}" if p.ep > 1
            else f"overlap_chunks={p.overlap_chunks}" if p.overlap_chunks > 1 else "tp_comm_overlap=true")
    return f"tp_mode={p.tp_mode!r} is costed for dense layers with standard attention only, not with {what}"
