"""A batch's data-parallel synchronization methods (``dp_sync``) costed over the rows that use each: the per-row
split of :func:`plait.cost.sync.method_costs` that :func:`plait.cost.batch.evaluate_batch` adds to the step."""

from __future__ import annotations

from typing import Any

from plait.cost.links import collective_s
from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns
from plait.sync import SyncMethod
from plait.units import DTYPE_BYTES
from plait.workload.model import ModelSpec
from plait.workload.tensors import parameter_shapes


def dp_sync_costs(model: ModelSpec, cluster: Cluster, cols: PlanColumns, reduce: Any, busy: Any,
                  params: dict[str, Any], backward: Any, stage: Any) -> tuple[Any, Any, Any]:
    """(gradient reduction that overlaps the backward, exposed seconds, extra memory bytes) per row: the plain
    reduction for ``allreduce`` rows, :func:`plait.cost.sync.method_costs` for the others (on one rank of the
    slowest ``stage``; ep = 1, :mod:`plait.plan.rules`; with cp, the cp ranks' gradient all-reduce added; for HSDP rows of infrequent methods the shard groups'
    reduction stays)."""
    xp, codes = cols.xp, cols["dp_sync"]
    exposed, extra = cols.zeros(), cols.zeros()
    for code, sync in _methods(cols):
        mask = codes == code
        over, shown, memory = _rows_costs(model, cluster, sync, cols, mask, params, stage, busy)
        if sync.pipelined:  # Pipe-SGD: behind the next step's forward and backward (Li et al. 2018, Sec. 3)
            reduce = xp.where(mask, 0.0, reduce)
        elif sync.partial_averaging and getattr(sync, "schedule", "even") == "profiled":  # DreamDDP's search (plait.cost.partial_times)
            from plait.cost.partial_times import profiled_exposed_s  # as method_costs: for these rows only

            shown = profiled_exposed_s(parameter_shapes(model), cluster, cols, over, backward, sync.every)
        elif sync.partial_averaging:  # each step's share behind the last backward (plait.plan.partial)
            from plait.plan.partial import exposed_s as partial_exposed_s  # as method_costs

            shown = partial_exposed_s(over, backward, sync.every, xp)
        elif not sync.infrequent:  # local SGD and DiLoCo keep ZeRO's in-replica reduction
            reduce = xp.where(mask, over, reduce)
        reduce = xp.where(mask, reduce + cp_gradient_reduce_s(cluster, cols, params), reduce)
        exposed = xp.where(mask, shown, exposed)
        extra = xp.where(mask, memory, extra)
    return reduce, exposed, extra


def cp_gradient_reduce_s(cluster: Cluster, cols: PlanColumns, params: dict[str, Any]) -> Any:
    """Under a ``dp_sync`` method the cp ranks of one replica, which hold one model copy between them, all-reduce
    their fp32 gradients every step before the method runs across replicas (plait/run/context.py
    ``average_over_cp``); 0 without context parallelism."""
    held = (params["dense"] + params["expert"]) * DTYPE_BYTES["fp32"]
    return collective_s(cluster, "all_reduce", cols["cp"], cols["tp"], held)


def _rows_costs(model: ModelSpec, cluster: Cluster, sync: SyncMethod, cols: PlanColumns, mask: Any,
                params: dict[str, Any], stage: Any, busy: Any) -> tuple[Any, Any, Any]:
    """:func:`plait.cost.sync.method_costs` evaluated on the rows ``mask`` selects only (a batch holds many
    methods, each costed per distinct message), spread back over every row (0 elsewhere). The methods' costs load
    here, with the first row that is not all-reduced: an all-reducing estimate never asks for them."""
    from plait.cost.sync import method_costs

    if cols.xp.scalar:
        return method_costs(model, cluster, sync, cols, params, stage, busy)
    import numpy as np  # columns only: a single plan's estimate runs without numpy

    rows = np.flatnonzero(mask)
    pick = lambda v: v[rows] if np.ndim(v) else v  # noqa: E731
    costs = method_costs(model, cluster, sync, cols.take(rows), {k: pick(v) for k, v in params.items()},
                         pick(stage), pick(busy))
    spread = []
    for values in costs:
        full = np.zeros(len(cols))
        full[rows] = values
        spread.append(full)
    return spread[0], spread[1], spread[2]


def _methods(cols: PlanColumns) -> list[tuple[int, SyncMethod]]:
    """(code, method) of every ``dp_sync`` other than the all-reduce among the rows of ``cols``."""
    codes = cols["dp_sync"]
    if cols.xp.scalar:
        return [(codes, cols.methods[codes])] if codes else []
    import numpy as np  # columns only: a single plan's estimate runs without numpy

    present = [int(c) for c in np.unique(codes[codes != 0])]
    return [(code, cols.methods[code]) for code in present]


def gradient_steps(cols: PlanColumns) -> Any:
    """The fraction of steps that run forward, backward and the optimizer, per row (``1 - p`` for PALSGD, whose
    other steps are pseudo-synchronization steps: Naganuma et al., arXiv 2504.18454; the authors' trainer skips the
    batch of such a step), or ``None`` when no row is PALSGD."""
    skipping = [(code, sync) for code, sync in _methods(cols) if sync.pseudo_steps]
    if not skipping:
        return None
    kept = cols.full(1.0)
    for code, sync in skipping:
        kept = cols.xp.where(cols["dp_sync"] == code, sync.gradient_step_fraction, kept)
    return kept
