"""Enumerate the distinct plans of a :class:`SearchSpace` as columns.

Per layout (tp, pp, cp, ep; dp fills the GPUs) the remaining knobs form a product of
small option lists; each option may set several plan fields at once (``("interleaved",
vpp)``, ``("zero3", dp_shard)``). The product is built with numpy index grids, so
enumeration costs a few array operations per layout. A search builds only the candidates that pass the pruning
rules, checked on these lists before the product (:mod:`plait.search.factored`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from plait.plan.columns import PlanColumns, code
from plait.search.space import SearchSpace, server_specs
from plait.sync import ALLREDUCE, SyncMethod
from plait.workload.model import ModelSpec

Options = dict[str, np.ndarray]  # field -> values, one entry per option


def _options(rows: list[dict[str, int | bool]]) -> Options:
    return {k: np.array([r[k] for r in rows]) for k in rows[0]}


def _schedules(space: SearchSpace, pp: int) -> Options:
    if pp == 1:
        return _options([{"schedule": code("schedule", "1f1b"), "vpp": 1}])
    rows = [{"schedule": code("schedule", s), "vpp": 1} for s in space.schedules if s != "interleaved"]
    if "interleaved" in space.schedules:
        rows += [{"schedule": code("schedule", "interleaved"), "vpp": v} for v in space.vpp]
    return _options(rows)


def _shardings(space: SearchSpace, dp: int) -> Options:
    rows: list[dict[str, int | bool]] = []
    for sharding in space.shardings:
        if sharding == "none" or dp == 1:
            shards = [1]
        elif sharding == "zero3":
            shards = [dp] + [s for s in space.hsdp_shard_sizes if 1 < s < dp and dp % s == 0]
        else:
            shards = [dp]
        for shard in shards:
            rows.append({"sharding": code("sharding", sharding if shard > 1 else "none"),
                         "dp_shard": shard, "dp_replicate": dp // shard})
    unique = {tuple(r.values()): r for r in rows}
    return _options(list(unique.values()))


def _recompute(space: SearchSpace, layers_per_stage: int) -> Options:
    rows = []
    for mode, fraction in space.recompute:
        layers = -1 if fraction >= 1.0 or mode != "full" else max(1, round(layers_per_stage * fraction))
        if mode == "full" and 0 <= layers >= layers_per_stage:
            layers = -1
        rows.append({"recompute": code("recompute", mode), "recompute_layers": layers})
    unique = {tuple(r.values()): r for r in rows}
    return _options(list(unique.values()))


def _tp_modes(space: SearchSpace, tp: int) -> Options:
    """1-D with each sequence-parallel setting, and every grid of ``space.tp_grids`` that ``tp`` makes (``tp =
    q*q*d``, ``q >= 2``; a grid splits its activations as sequence parallelism does, so ``sp`` is on)."""
    rows: list[dict[str, int | bool]] = [{"tp_mode": code("tp_mode", "1d"), "tp_depth": 1, "sp": sp}
                                         for sp in (space.sequence_parallel if tp > 1 else (False,))]
    for mode, depth in space.tp_grids:
        q = math.isqrt(tp // depth) if tp % depth == 0 else 0
        if q >= 2 and q * q * depth == tp:
            rows.append({"tp_mode": code("tp_mode", mode), "tp_depth": depth, "sp": True})
    return _options(rows)


def _offload(space: SearchSpace, shardings: Options) -> Options:
    """Offload options crossed with sharding options (parameter offload only where zero3)."""
    zero3 = shardings["sharding"] == code("sharding", "zero3")
    rows: list[dict[str, int | bool]] = []
    for i in range(len(shardings["sharding"])):
        for optimizer, params in space.offload:
            if params and not zero3[i]:
                continue
            row = {k: v[i] for k, v in shardings.items()}
            row.update({"offload_optimizer": optimizer, "offload_params": params})
            rows.append(row)
    return _options(rows)


def _fill(out: dict[str, np.ndarray], start: int, option_lists: list[Options]) -> int:
    """Write the product of ``option_lists`` (the last list varying fastest) into ``out`` from row ``start``, each
    field broadcast along its list's axis (no index grids); returns the row after the last."""
    shape = [len(next(iter(o.values()))) for o in option_lists]
    end = start + int(np.prod(shape))
    for axis, options in enumerate(option_lists):
        along = [1] * len(shape)
        along[axis] = shape[axis]
        for name, values in options.items():
            out[name][start:end].reshape(shape)[...] = values.reshape(along)
    return end


def layouts(space: SearchSpace) -> list[tuple[int, int, int]]:
    """(tp, pp, cp) of every layout that divides the GPUs, in enumeration order (dp fills the rest)."""
    return [(tp, pp, cp) for tp in space.tp for pp in space.pp for cp in space.cp if space.gpus % (tp * pp * cp) == 0]


def _layout_options(model: ModelSpec, space: SearchSpace, tp: int, pp: int, cp: int,
                    shared: dict[tuple[str, int], Options] | None = None) -> list[Options]:
    """The option lists whose product is the candidates of one layout (``shared``: the lists that depend on one
    degree only, kept across the layouts of one space)."""
    dp = space.gpus // (tp * pp * cp)
    shared = {} if shared is None else shared

    def once(what: str, degree: int, build: Callable[[], Options]) -> Options:
        if (what, degree) not in shared:
            shared[(what, degree)] = build()
        return shared[(what, degree)]

    return [
        {"tp": np.array([tp]), "pp": np.array([pp]), "cp": np.array([cp])},
        {"cp_attention": np.array([code("cp_attention", a) for a in (space.cp_attentions if cp > 1 else ("ring",))])},
        {"ep": np.array(space.ep)},
        {"global_batch": np.array(space.global_batches)},
        {"micro_batch": np.array(space.micro_batches)},
        once("schedule", pp, lambda: _schedules(space, pp)),
        once("sharding", dp, lambda: _offload(space, _shardings(space, dp))),
        once("recompute", pp, lambda: _recompute(space, -(-model.num_layers // pp))),
        once("tp_mode", tp, lambda: _tp_modes(space, tp)),
        {"precision": np.array([code("precision", p) for p in space.precisions])},
        {"grad_reduce_dtype": np.array([code("grad_reduce_dtype", g) for g in space.grad_reduce_dtypes])},
        {"dp_sync": np.array([space.methods.index(s) for s in _dp_syncs(model, space, tp, pp, cp)])},
    ]


def layout_options(model: ModelSpec, space: SearchSpace) -> list[list[Options]]:
    """The option lists of every layout of :func:`layouts`."""
    shared: dict[tuple[str, int], Options] = {}
    return [_layout_options(model, space, *layout, shared) for layout in layouts(space)]


def _dp_syncs(model: ModelSpec, space: SearchSpace, tp: int, pp: int, cp: int) -> tuple[SyncMethod, ...]:
    """The synchronization methods a layout tries: every one asked for on a layout without context parallelism of
    a dense model with standard attention (what :mod:`plait.cost.sync` models) that is pure data-parallel or, with
    ``space.syncs_with_model_parallel``, has TP or PP; else the all-reduce."""
    modelled = cp == 1 and not (model.moe or model.mla or model.qk_norm)
    if not (modelled and (tp == pp == 1 or space.syncs_with_model_parallel)):
        return (ALLREDUCE,)
    dp = space.gpus // (tp * pp * cp)
    servers = server_specs(dp, whole_layers=tp == pp == 1) if space.param_servers and dp > 1 else ()
    return (*space.dp_syncs, *servers)


def layout_sizes(model: ModelSpec, space: SearchSpace) -> list[int]:
    """Candidates of each layout of :func:`layouts`, without building them."""
    return [int(np.prod([len(next(iter(o.values()))) for o in lists])) for lists in layout_options(model, space)]


def _columns(space: SearchSpace, option_lists: list[list[Options]], rows: int) -> PlanColumns:
    """The candidates of consecutive layouts' option lists, as columns."""
    out = {name: np.empty(rows, dtype=values.dtype) for lists in option_lists[:1] for options in lists
           for name, values in options.items()}
    start = 0
    for lists in option_lists:
        start = _fill(out, start, lists)
    out["seq_len"] = np.full(rows, space.seq_len, dtype=np.int64)
    return PlanColumns.from_arrays(out, rows, space.methods)


def enumerate_space(model: ModelSpec, space: SearchSpace) -> PlanColumns:
    """Every distinct candidate plan of ``space``."""
    options = layout_options(model, space)
    if not options:
        return PlanColumns.from_arrays({}, 0, space.methods)
    return _columns(space, options, sum(int(np.prod([len(next(iter(o.values()))) for o in lists]))
                                        for lists in options))
