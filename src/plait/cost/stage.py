"""Per-micro-batch time of one pipeline stage, by component, column-wise over plans.

A stage runs its layers (per-layer costs from :mod:`plait.cost.inner`), the embedding on
the first stage and the output projection plus loss on the last, with their TP collectives. Activation transfers
between stages are not part of a stage's time: in the steady state a rank computes other
micro-batches while they travel (:mod:`plait.cost.pipeline` charges them on the fill and
drain path, as the simulator finds). ZeRO-3/FSDP gathers are
prefetched one layer ahead, so per layer only the part of the gather (and, in the
backward, gather plus reduce-scatter) longer than that layer's compute is exposed, plus
the first gather, which nothing hides (Zhao et al. 2023, "PyTorch FSDP", Sec. 3.3). FSDP1's
``BACKWARD_POST`` issues each backward gather only after the previous layer's gradients, so
those gathers are in line and only the reduce-scatters overlap.
Without prefetch every gather is in line; per-module sharding (DeepSpeed-style hooks)
gathers recomputed layers a third time.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING

from plait.cost.host import exposed_host_s
from plait.cost.inner_values import ABSENT, Inner, LayerKind
from plait.cost.overlap import hidden_remainder
from plait.cost.params import stage_layer_counts
from plait.cost.swap import SwapTimes, exposed_swap_s, swapped_layers
from plait.engine.facts import EngineFacts
from plait.frozen import direct_init
from plait.kept import Kept
from plait.plan.columns import PlanColumns
from plait.plan.ops import Ops
from plait.workload.model import ModelSpec

if TYPE_CHECKING:
    import numpy as np

COMPONENTS = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "fsdp_comm", "swap", "host")
Columns = dict[str, "np.ndarray"]


def recomputed_layers(cols: PlanColumns, n_dense: np.ndarray, n_moe: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dense, MoE) layers of a stage that full recomputation recomputes (the first ``recompute_layers``)."""
    xp, layers = cols.xp, n_dense + n_moe
    k = xp.where(cols["recompute_layers"] < 0, layers, xp.minimum(cols["recompute_layers"], layers))
    k = xp.where(cols.is_("recompute", "full"), k, 0)
    dense = xp.minimum(k, n_dense)
    return dense, k - dense


@direct_init
@dataclass(frozen=True)
class ShardTimes:
    """ZeRO-3/FSDP seconds per layer of one kind and per row (``plait.cost.fsdp_layer.fsdp_layer_s``)."""

    gather_s: np.ndarray
    """Parameter all-gather (and its host-to-device copy when parameters are offloaded)."""
    reduce_s: np.ndarray
    """Gradient reduce-scatter (and the gradient shard's copy back to the host)."""
    host_fwd_s: np.ndarray
    """FSDP2's per-layer hooks around the forward (measured by plait calibrate; 0 on GPUs)."""
    host_bwd_s: np.ndarray
    """The same around the backward."""
    copy_out_s: np.ndarray | float = 0.0
    """The copy of one gather's buffer into the parameters, on the compute stream (``EngineFacts.shard_copies``)."""
    copy_in_s: np.ndarray | float = 0.0
    """The copy of the gradients into the reduce-scatter's buffer, on the compute stream (the same)."""


Layers = tuple[Columns, Columns, "np.ndarray", "np.ndarray"]
"""What a stage's transformer layers add up to (:func:`layers_time`): (forward, backward) seconds per component and the
host's (forward, backward) seconds."""


def layers_time(cols: PlanColumns, inner: Inner, fsdp: tuple[ShardTimes, ShardTimes], n_dense: np.ndarray,
                n_moe: np.ndarray, framework: EngineFacts, overlap: float = 1.0,
                swap: tuple[SwapTimes, SwapTimes] | None = None) -> Layers:
    """The (forward, backward) components of a stage's ``n_dense`` dense and ``n_moe`` MoE layers, with the first
    gather, and the host's seconds for them (:func:`stage_time` adds the embedding and the head): stages of the same
    layer counts share them."""
    xp = cols.xp
    rc_dense, rc_moe = recomputed_layers(cols, n_dense, n_moe)
    full = cols.is_("recompute", "full")
    fwd = dict.fromkeys(COMPONENTS, 0.0)
    bwd = dict.fromkeys(COMPONENTS, 0.0)
    first_gather = cols.zeros()
    host_fwd = host_bwd = 0.0
    swaps = (None, None) if swap is None else swap
    sw_counts = (n_dense, n_moe) if swap is None else swapped_layers(cols, n_dense, n_moe)
    for kind, shard, count, rc_kind, swapped, sw_count in zip(inner.kinds, fsdp, (n_dense, n_moe), (rc_dense, rc_moe),
                                                             swaps, sw_counts):
        if kind is ABSENT:  # a kind the model lacks (one plan): no layers, every figure 0, so it adds exactly nothing
            continue
        rc_count = xp.where(full, rc_kind, count)
        rc_share = xp.where(count > 0, rc_count / xp.maximum(count, 1), 0.0)
        fsdp_fwd, fsdp_bwd = _shard_layer_s(kind, shard, rc_share, full, framework, overlap, xp)
        first_gather = xp.where((first_gather == 0) & (count > 0), shard.gather_s, first_gather)
        host_fwd = host_fwd + count * kind.host_fwd_s
        host_bwd = host_bwd + count * kind.host_bwd_s
        fwd["compute"] = fwd["compute"] + count * kind.fwd_s
        bwd["compute"] = bwd["compute"] + count * kind.bwd_s
        bwd["recompute"] = bwd["recompute"] + rc_count * kind.recompute_s
        for key, f_s, b_s in (("tp_comm", kind.tp_fwd_s, kind.tp_bwd_s), ("cp_comm", kind.cp_fwd_s, kind.cp_bwd_s),
                              ("ep_comm", kind.ep_fwd_s, kind.ep_bwd_s)):
            fwd[key] = fwd[key] + count * f_s
            bwd[key] = bwd[key] + count * b_s
        fwd["fsdp_comm"] = fwd["fsdp_comm"] + count * fsdp_fwd
        bwd["fsdp_comm"] = bwd["fsdp_comm"] + count * fsdp_bwd
        if swapped is not None:  # each layer's copies behind its neighbour's work (plait.cost.swap)
            out_s, in_s = exposed_swap_s(swapped, kind.fwd_s + kind.tp_fwd_s, kind.bwd_s + kind.tp_bwd_s, xp)
            fwd["swap"] = fwd["swap"] + sw_count * out_s
            bwd["swap"] = bwd["swap"] + sw_count * in_s
    fwd["fsdp_comm"] = fwd["fsdp_comm"] + first_gather
    return fwd, bwd, host_fwd, host_bwd  # type: ignore[return-value]


def _shard_layer_s(kind: LayerKind, shard: ShardTimes, rc_share: np.ndarray, full: np.ndarray,
                   framework: EngineFacts, overlap: float, xp: Ops) -> tuple[np.ndarray, np.ndarray]:
    """ZeRO-3/FSDP (forward, backward) seconds one layer of ``kind`` exposes: the gathers and reduce-scatter past
    its work when prefetched (module docstring), plus the hooks and copies in line with it."""
    gather, reduce = shard.gather_s, shard.reduce_s
    regathers = rc_share * full if framework.shard_unit == "module" else 0.0  # per backward, for recompute
    regather = regathers * gather
    bwd_comm = gather + regather + reduce
    if framework.shard_prefetch:
        fsdp_fwd = hidden_remainder(gather, kind.fwd_s + kind.tp_fwd_s, overlap, xp)
        bwd_work = kind.bwd_s + rc_share * kind.recompute_s + kind.tp_bwd_s
        if framework.shard_backward_prefetch == "post":
            fsdp_bwd = gather + regather + hidden_remainder(reduce, bwd_work, overlap, xp)
        else:
            fsdp_bwd = hidden_remainder(bwd_comm, bwd_work, overlap, xp)
    else:
        fsdp_fwd, fsdp_bwd = gather, bwd_comm
    fsdp_fwd = fsdp_fwd + shard.host_fwd_s + shard.copy_out_s  # hooks and copies run in line with the layer
    fsdp_bwd = (fsdp_bwd + shard.host_bwd_s + rc_share * full * shard.host_fwd_s  # recompute re-runs the hooks
                + shard.copy_out_s * (1.0 + regathers)
                + shard.copy_in_s)
    return fsdp_fwd, fsdp_bwd


def stage_time(model: ModelSpec, cols: PlanColumns, inner: Inner, fsdp: tuple[ShardTimes, ShardTimes],
               stage: np.ndarray, framework: EngineFacts, overlap: float = 1.0,
               asynchronous: bool = True, swap: tuple[SwapTimes, SwapTimes] | None = None,
               layers: Layers | None = None) -> tuple[Columns, Columns]:
    """(forward, backward) seconds per component of one micro-batch on ``stage`` (per row);
    ``overlap`` is the accelerator's ``comm_overlap`` figure, ``asynchronous`` its ``asynchronous_launch``;
    ``swap``: the (dense, MoE) activation swaps of :mod:`plait.cost.swap` (``None``: no row swaps); ``layers``: the
    stage's :func:`layers_time`, when the caller has them (read, not written)."""
    xp = cols.xp
    if layers is None:
        layers = layers_time(cols, inner, fsdp, *stage_layer_counts(model, cols["pp"], stage, xp), framework, overlap,
                             swap)
    fwd, bwd, host_fwd, host_bwd = layers
    fwd, bwd = dict(fwd), dict(bwd)
    first, last = stage == 0, stage == cols["pp"] - 1
    fwd["compute"] = fwd["compute"] + first * inner.embedding_fwd_s + last * inner.head_fwd_s
    bwd["compute"] = bwd["compute"] + first * inner.embedding_bwd_s + last * inner.head_bwd_s
    fwd["tp_comm"] = fwd["tp_comm"] + first * inner.embedding_tp_fwd_s + last * inner.head_tp_fwd_s
    bwd["tp_comm"] = bwd["tp_comm"] + first * inner.embedding_tp_bwd_s + last * inner.head_tp_bwd_s
    fwd["host"] = exposed_host_s(sum(fwd.values()), host_fwd, xp, asynchronous)  # the streams joined once per pass
    bwd["host"] = exposed_host_s(sum(bwd.values()), host_bwd, xp, asynchronous)
    if xp.scalar:  # floats already (a bool or int factor times a float, added to 0.0)
        return fwd, bwd
    size, column = len(cols), xp.column
    return {k: column(v, size) for k, v in fwd.items()}, {k: column(v, size) for k, v in bwd.items()}


STAGE_FIELDS = ("recompute", "recompute_layers")
"""The plan fields :func:`stage_time` reads but ``pp``, which enters only through the stage's layer counts and whether
it holds the embedding or the head (``kind`` of :func:`kept_stage_time`)."""
_STAGE_VALUES = attrgetter(*STAGE_FIELDS)
_STAGES: Kept[tuple[Columns, Columns]] = Kept(256)
_LAYERS: Kept[Layers] = Kept(256)


def kept_stage_time(model: ModelSpec, cols: PlanColumns, inner: Inner, fsdp: tuple[ShardTimes, ShardTimes],
                    stage: int, kind: tuple[int, int, bool, bool], framework: EngineFacts, overlap: float,
                    asynchronous: bool) -> tuple[Columns, Columns]:
    """:func:`stage_time` of one plan's ``stage`` (no activation swapping), kept for the last 256 by ``kind`` (its
    (dense, MoE) layer counts and whether it is the first and the last stage: what it reads of ``stage`` and ``pp``,
    :func:`plait.cost.batch.stage_class`), the plan's :data:`STAGE_FIELDS`, ``overlap``, ``asynchronous`` and the
    identity of the model, the per-layer quantities and FSDP times (kept themselves, so plans that share them share
    these: a planner's neighbours, a plan estimated again) and the cost facts, which the entry holds (frozen: the same
    object is the same value, its id not reused while it lives). Its layers' sums (:func:`layers_time`) are kept the
    same way by the layer counts alone: the stages of a pipeline that differ only by the embedding or the head (the
    first, a middle and the last of equal layer counts) add up their layers once. The dicts are shared: read, never
    written."""
    assert cols.single is not None, "one plan's columns"
    plan_values, held = _STAGE_VALUES(cols.single), (model, inner, fsdp, framework)
    key = (id(model), id(inner), id(fsdp), id(framework), overlap, asynchronous, *kind, plan_values)

    def compute() -> tuple[Columns, Columns]:
        n_dense, n_moe = kind[0], kind[1]
        layers = _LAYERS.get((id(inner), id(fsdp), id(framework), overlap, n_dense, n_moe, plan_values), held,
                             lambda: layers_time(cols, inner, fsdp, n_dense, n_moe, framework, overlap))
        return stage_time(model, cols, inner, fsdp, stage, framework, overlap, asynchronous, layers=layers)

    return _STAGES.get(key, held, compute)
