"""What every pipeline stage of a batch row shares, computed once before its stages are costed
(:mod:`plait.cost.batch`): the columns with the sequence filled, the per-layer quantities (:mod:`plait.cost.inner`),
each layer kind's FSDP times (:mod:`plait.cost.fsdp_layer`), the hop between stages (:mod:`plait.cost.p2p`) and the
activation swaps (:mod:`plait.cost.swap`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import TYPE_CHECKING, Any

from plait.cost.fsdp_layer import fsdp_layer_times
from plait.cost.inner import Known, inner_columns
from plait.cost.inner_values import ABSENT, Inner, LayerKind
from plait.cost.memory import shard_groups
from plait.cost.p2p import hop_s
from plait.cost.stage import ShardTimes
from plait.cost.swap import SwapTimes, swap_layer_s
from plait.engine.facts import EngineFacts
from plait.frozen import direct_init
from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns
from plait.plan.ops import is_array
from plait.plan.plan import Plan
from plait.workload.model import ModelSpec

if TYPE_CHECKING:
    import numpy as np


@direct_init
@dataclass(frozen=True)
class Prepared:
    """What every stage of a row shares, computed once: columns with the sequence filled, per-layer quantities
    (:mod:`plait.cost.inner`), per-layer FSDP times and the pipeline hop time."""

    cols: PlanColumns
    inner: Inner
    fsdp: tuple[ShardTimes, ShardTimes]
    """(dense, MoE) layer gather/reduce-scatter/hook seconds."""
    p2p_s: np.ndarray | float
    """One activation (or gradient) transfer between neighbouring stages (:func:`plait.cost.p2p.hop_s`)."""
    framework: EngineFacts
    """The cost facts these were computed under."""
    memo: dict[Any, Any] = field(default_factory=dict, compare=False)
    """A single plan's per-stage results (:func:`stage_pass`, :func:`stage_sync`, its parameters) and its stages'
    :func:`stage_class`, kept as they are costed."""
    swap: tuple[SwapTimes, SwapTimes] | None = None
    """(dense, MoE) per-layer activation swaps (:mod:`plait.cost.swap`); ``None`` when no row swaps."""

    def take(self, index: np.ndarray) -> Prepared:
        """Rows ``index`` of a batch's shared quantities (each per-row column taken; the same values as preparing
        those rows alone, since every quantity is a function of its own row)."""
        assert not self.cols.xp.scalar, "one plan has no rows to take"
        return Prepared(cols=self.cols.take(index), inner=take_rows(self.inner, index), fsdp=take_rows(self.fsdp, index),
                        p2p_s=take_rows(self.p2p_s, index), framework=self.framework)


def take_rows(value: Any, index: np.ndarray) -> Any:
    """Rows ``index`` of every per-row column in ``value`` (an array, a dataclass or tuple of them, or a number)."""
    if is_array(value) and value.ndim:
        return value[index]
    if value is ABSENT:  # one shared value, which the cost model knows by its identity
        return value
    if is_dataclass(value) and not isinstance(value, type):
        return replace(value, **{f.name: take_rows(getattr(value, f.name), index) for f in fields(value) if f.init})
    if isinstance(value, tuple):
        return tuple(take_rows(v, index) for v in value)
    return value


def prepare(model: ModelSpec, cluster: Cluster, cols: PlanColumns, framework: EngineFacts,
            known: Known | None = None) -> Prepared:
    """Columns with the sequence filled, inner per-layer quantities, FSDP per-layer times, p2p time (``known``: see
    :func:`plait.cost.inner.inner_columns`)."""
    if cols.single is not None:
        cols = PlanColumns.one(cols.single.with_seq_len(model.seq_len)) if cols.single.seq_len <= 0 else cols
    else:
        data = dict(cols.data)
        data["seq_len"] = cols.xp.where(cols["seq_len"] > 0, cols["seq_len"], model.seq_len)
        cols = PlanColumns(data, methods=cols.methods)
    inner = inner_columns(model, cluster, cols, framework, known)
    fsdp = fsdp_layer_times(cluster, cols, inner, framework)
    p2p = hop_s(cluster, cols, inner.p2p_bytes, framework)
    swapping = cols["swap_activations"] if cols.xp.scalar else cols["swap_activations"].any()
    swap = swap_layer_s(cluster, cols, inner, fsdp, shard_groups(cols)[0]) if swapping else None
    return Prepared(cols=cols, inner=inner, fsdp=fsdp, p2p_s=p2p, framework=framework, swap=swap)


def layer_columns(model: ModelSpec, cluster: Cluster, plan: Plan, framework: EngineFacts) -> tuple[LayerKind, ShardTimes]:
    """One plan's dense layer: its compute and in-layer collectives (:mod:`plait.cost.inner`) and its FSDP gather,
    reduce-scatter and hook times, as floats."""
    prepared = prepare(model, cluster, PlanColumns.one(plan), framework)
    return prepared.inner.dense, prepared.fsdp[0]
