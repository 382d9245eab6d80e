"""2-D (SUMMA) and 2.5-D (Tesseract) tensor parallelism of a dense transformer layer: bytes, time and memory.

Layout (ColossalAI's ``colossalai/legacy/nn/layer/parallel_2d`` and ``parallel_2p5d``, read at commit
4f9953be; plait's runtime is :mod:`plait.run.tp2d`): the ``tp = q*q*d`` ranks of a tensor-parallel group form ``d``
grids of ``q x q`` (``d = 1`` for 2-D), ranks laid out column fastest, then row, then depth, so a *row* group is
``q`` consecutive ranks, a *column* group ``q`` ranks ``q`` apart and a *depth* group ``d`` ranks ``q*q`` apart.
An activation ``X [T, k]`` of ``T`` tokens is split by sequences over the ``q*d`` (depth, row) pairs and by width
over the columns: rank ``(z, i, j)`` holds ``X_ij [T/(q d), k/q]``. A weight ``W [k, n]`` is cut into ``q x q``
blocks, ``W_ij [k/q, n/q]`` on rank ``(i, j)`` of every depth slice (ColossalAI's ``Linear2p5D`` creates its weight
``[k/q, n/q]`` on every depth rank and broadcasts it over the depth group; the batch is split over the slices).

SUMMA (van de Geijn & Watts 1997, "SUMMA: scalable universal matrix multiplication algorithm", Concurrency:
Practice and Experience 9(4); ColossalAI's ``Matmul_AB_2D``/``Matmul_AB_2p5D`` run it per depth slice): ``Y = X W`` runs ``q`` steps; at step ``l`` column
``l`` broadcasts ``X_il`` along each row, row ``l`` broadcasts ``W_lj`` along each column, and every rank adds
``X_il W_lj``. The backward runs the two transposed products the same way (ColossalAI's ``Matmul_ABT_2D`` and
``Matmul_ATB_2D``): ``dX = dY W^T`` broadcasts ``W_lj`` along columns and *reduces* the partial ``dX_il`` along
rows to column ``l``; ``dW = X^T dY`` broadcasts ``X_il`` along rows and reduces the partial ``dW_lj`` along
columns to row ``l``. Per linear layer and rank, with ``T' = T/(q d)`` (payload bytes of each broadcast or reduce
the rank takes part in, sender or receiver):

===========  =========================================  ==================================================
pass         row group (``q`` ops each)                  column group (``q`` ops each)
===========  =========================================  ==================================================
forward      broadcast ``T' k/q``                        broadcast ``k n/q^2``
backward     broadcast ``T' k/q``, reduce ``T' k/q``     broadcast ``k n/q^2``, reduce ``k n/q^2``
===========  =========================================  ==================================================

so a rank moves ``T k/(q d) + k n/q`` per linear in the forward, against Megatron 1-D's ``T k`` (an all-reduce or
all-gather + reduce-scatter of the hidden states, Korthikanti et al. 2022 Sec. 4.2.2) whatever ``tp`` is: 2-D
shrinks activation traffic by ``q d`` but adds weight traffic that does not shrink with the micro-batch. The
Tesseract paper's own cost table was not available here (only its abstract); the table above is derived from the
algorithm as ColossalAI runs it and is checked to the byte against plait's runtime (``tests/test_tp2d.py``).

Norms: the hidden width is split over a row, so an RMSNorm all-reduces its per-token sum of squares (a LayerNorm
its mean and mean square) along the row, forward and backward, and the norm weights (split ``h/q`` over columns)
have their gradients summed over the column group. 2.5-D sums every weight gradient over the depth group too.
Both are charged per micro-batch, as the runtime does them in each backward (an upper bound for accumulation).

Collective times: a broadcast or reduce of ``m`` bytes over ``g`` ranks as NCCL's pipelined ring, ``(g - 1)``
latencies plus ``m`` over the bus bandwidth (NCCL-tests doc/PERFORMANCE.md: broadcast and reduce have
``busBw = algBw``), on the tier each group crosses (:func:`plait.cost.collectives.group_link`); the all-reduces
as the cost model's (:func:`plait.cost.collectives.all_reduce_s`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from plait.cost import collectives as coll
from plait.cost.compute import gemms_fwd_bwd_s
from plait.cost.flops import Gemm, layer_gemms
from plait.cost.setup import Setup
from plait.plan.plan import Plan
from plait.workload.model import ModelSpec

GROUPS = ("row", "col", "depth")


def grid(plan: Plan) -> tuple[int, int]:
    """``(q, d)`` of the plan's tensor-parallel grid: ``(tp, 1)`` for 1-D (no grid)."""
    if plan.tp_mode == "1d":
        return plan.tp, 1
    d = plan.tp_depth if plan.tp_mode == "2.5d" else 1
    return math.isqrt(plan.tp // d), d


def group_links(setup: Setup) -> dict[str, coll.GroupLink]:
    """The network each group of the grid crosses: rows are consecutive ranks, columns ``q`` apart, depth ``q*q``
    apart (ColossalAI's ``initializer_2d.py`` / ``initializer_2p5d.py`` order, tp innermost in plait's layout)."""
    q, d = grid(setup.plan)
    cluster = setup.cluster
    return {"row": coll.group_link(cluster, q, 1), "col": coll.group_link(cluster, q, q),
            "depth": coll.group_link(cluster, d, q * q)}


@dataclass(frozen=True)
class Traffic:
    """Payload bytes one rank moves in one pass, per group and kind (``(group, kind) -> bytes``), the number of
    operations behind each (``(group, kind) -> ops``), and every batch of equal operations as
    ``(group, kind, ops, bytes each)`` (what the time is computed from: a collective's speed depends on its size)."""

    bytes_: dict[tuple[str, str], float]
    ops: dict[tuple[str, str], int]
    parts: tuple[tuple[str, str, int, float], ...]

    def total(self, group: str | None = None) -> float:
        """Bytes over every group, or over one."""
        return sum(v for (g, _), v in self.bytes_.items() if group in (None, g))


class _Tally:
    """A :class:`Traffic` being added up."""

    def __init__(self) -> None:
        self.bytes_: dict[tuple[str, str], float] = {}
        self.ops: dict[tuple[str, str], int] = {}
        self.parts: list[tuple[str, str, int, float]] = []

    def add(self, group: str, kind: str, ops: int, each: float) -> None:
        key = (group, kind)
        self.bytes_[key] = self.bytes_.get(key, 0.0) + ops * each
        self.ops[key] = self.ops.get(key, 0) + ops
        self.parts.append((group, kind, ops, each))

    def done(self) -> Traffic:
        return Traffic(self.bytes_, self.ops, tuple(self.parts))


def base_setup(setup: Setup) -> Setup:
    """``setup`` with its tensor parallelism as Megatron 1-D with sequence parallelism, which splits every
    activation and weight of the layer ``tp`` ways as the grid does: the costs a grid shares with it."""
    plan = replace(setup.plan, tp_mode="1d", tp_depth=1, sp=True)
    return Setup(model=setup.model, cluster=setup.cluster, plan=plan, framework=setup.framework)


def _full_gemms(setup: Setup) -> list[Gemm]:
    """The dense layer's GEMMs of one unsplit rank (``tp = 1``): ``m`` tokens, ``k`` in, ``n`` out."""
    plan = replace(setup.plan, tp=1, tp_mode="1d", tp_depth=1, sp=False)
    return layer_gemms(Setup(model=setup.model, cluster=setup.cluster, plan=plan, framework=setup.framework), False)


def norm_stats(model: ModelSpec) -> int:
    """Per-token statistics a norm all-reduces along a row: RMSNorm its sum of squares, LayerNorm mean and mean
    square."""
    return 1 if model.norm == "rmsnorm" else 2


def pass_traffic(model: ModelSpec, plan: Plan, tokens: int, gemms: list[tuple[int, int]], act_bytes: int,
                 weight_bytes: int, stat_bytes: int = 4, grad_bytes: int = 0) -> tuple[Traffic, Traffic]:
    """(forward, backward) :class:`Traffic` of one dense layer on one rank for a micro-batch of ``tokens`` tokens
    (before the split), ``gemms`` its linear layers as ``(k, n)``; the table in the module docstring, plus the
    norms' statistics (``stat_bytes`` each) and the sums of finished weight gradients (``grad_bytes`` each, the
    gradient buffer's dtype; 0: ``weight_bytes``). A SUMMA step's partial ``dW`` is a GEMM output, in
    ``weight_bytes``."""
    grad_bytes = grad_bytes or weight_bytes
    q, d = grid(plan)
    rows = tokens // (q * d)
    fwd, bwd = _Tally(), _Tally()
    for k, n in gemms:
        x_block, w_block = act_bytes * rows * (k // q), weight_bytes * (k // q) * (n // q)
        fwd.add("row", "broadcast", q, x_block)
        fwd.add("col", "broadcast", q, w_block)
        bwd.add("row", "broadcast", q, x_block)
        bwd.add("row", "reduce", q, x_block)
        bwd.add("col", "broadcast", q, w_block)
        bwd.add("col", "reduce", q, w_block)
        if d > 1:
            bwd.add("depth", "all_reduce", 1, grad_bytes * (k // q) * (n // q))
    stats = stat_bytes * norm_stats(model) * rows
    norms = 2  # before attention and before the MLP
    fwd.add("row", "all_reduce", norms, stats)
    bwd.add("row", "all_reduce", norms, stats)
    norm_weight = grad_bytes * model.norm_params() // q
    bwd.add("col", "all_reduce", norms, norm_weight)
    if d > 1:
        bwd.add("depth", "all_reduce", norms, norm_weight)
    return fwd.done(), bwd.done()


def traffic_s(traffic: Traffic, links: dict[str, coll.GroupLink]) -> float:
    """Seconds of one pass's collectives, one after another (SUMMA waits for each step's blocks)."""
    total = 0.0
    for group, kind, ops, each in traffic.parts:
        if kind == "all_reduce":
            total += ops * coll.all_reduce_s(each, links[group])
        else:  # a pipelined ring broadcast or reduce: busBw = algBw (NCCL-tests doc/PERFORMANCE.md)
            total += ops * _ring_pipeline_s(each, links[group], kind)
    return total


def _ring_pipeline_s(num_bytes: float, link: coll.GroupLink, kind: str) -> float:
    if link.size <= 1 or num_bytes <= 0:
        return 0.0
    measured = "all_gather" if kind == "broadcast" else "reduce_scatter"  # the tier's curve of the same ring
    return (link.size - 1) * link.latency_s + num_bytes / link.bus_bytes_per_s(num_bytes, measured)


@dataclass(frozen=True)
class GridLayer:
    """What a 2-D or 2.5-D grid changes in one dense layer's cost on one rank for one micro-batch."""

    comm_fwd_s: float
    """The forward's broadcasts, reduces and norm all-reduces."""
    comm_bwd_s: float
    """The backward's, with the weight gradients' sums."""
    gemm_extra_fwd_s: float
    """SUMMA's ``q`` smaller GEMMs per linear minus the 1-D split's one GEMM (same FLOPs, other shapes)."""
    gemm_extra_bwd_s: float
    """The same for the backward's two products."""
    num_params: float
    """Layer parameters on the rank: the matrices' ``1/q^2`` blocks (kept on each of the ``d`` slices) and the
    norms' ``1/q`` slices."""
    fwd: Traffic
    bwd: Traffic


def grid_layer(setup: Setup) -> GridLayer:
    """The grid's terms for a dense layer of ``setup`` (whose plan has ``tp_mode`` 2d or 2.5d)."""
    model, plan = setup.model, setup.plan
    q, d = grid(plan)
    full = _full_gemms(setup)
    shapes = [(g.k, g.n) for g in full for _ in range(g.count)]
    fwd, bwd = pass_traffic(model, plan, setup.tokens, shapes, setup.act_bytes, setup.act_bytes,
                            grad_bytes=setup.grad_bytes)
    links = group_links(setup)
    summa = [Gemm(max(g.m // (q * d), 1), g.n // q, g.k // q, g.count * q) for g in full]
    summa_fwd, summa_bwd = gemms_fwd_bwd_s(summa, setup)
    split_fwd, split_bwd = gemms_fwd_bwd_s(layer_gemms(base_setup(setup), False), setup)  # what 1-D charged
    matrices = sum(g.k * g.n * g.count for g in full)
    return GridLayer(comm_fwd_s=traffic_s(fwd, links), comm_bwd_s=traffic_s(bwd, links),
                     gemm_extra_fwd_s=summa_fwd - split_fwd, gemm_extra_bwd_s=summa_bwd - split_bwd,
                     num_params=matrices / (q * q) + 2 * model.norm_params() / q, fwd=fwd, bwd=bwd)
