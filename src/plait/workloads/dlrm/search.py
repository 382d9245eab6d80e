"""Placing a DLRM's embedding tables on ranks: greedy searches over TorchRec's sharding types.

Tables are placed one at a time, the costliest first (most lookup bytes per step), each where the step that
:func:`plait.workloads.dlrm.cost.estimate_dlrm` predicts for the tables placed so far is shortest — ties to the lower
peak memory — among the placements that fit: table-wise on each rank, column-wise over the least-loaded 2 or 4
ranks, row-wise over the group, table-row-wise on each node, data-parallel (tables whose shards would not be a multiple
of 4 columns only data-parallel: :func:`plait.workloads.dlrm.cost.fused_width_ok`; a mean-pooled table beside
multi-hot ones not by rows: :func:`plait.workloads.dlrm.cost.rows_ok`). Minimising the slowest rank table by
table favours spreading every table, even where that adds work (narrow column shards, row-wise reduce-scatters),
so a second pass chooses each table's placement by the work it adds over all ranks instead, on the least-loaded
ranks (longest-processing-time first, Graham 1969); the plan whose step is shorter wins. The second pass is the
heuristic of TorchRec's own planner (its proposer takes each table's cheapest sharding option, its
GreedyPerfPartitioner places the costliest shard first onto the rank that finishes it soonest), with plait's cost
model as the measure. A greedy pass cannot undo an early choice, so the shorter plan is then improved by local
search (steepest descent over single moves: one table to another of its options) until no move shortens the step,
then the total time over ranks, then the peak memory.
"""

from __future__ import annotations

from dataclasses import replace

from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.workloads.dlrm.cost import DlrmEstimate, Placement, estimate_dlrm, fused_width_ok, rows_ok
from plait.workloads.dlrm.model import DlrmSpec, Table


def options(table: Table, group: int, node: int, loaded: list[int], by_rows: bool = True) -> list[Placement]:
    """The placements tried for ``table`` (module docstring); ``loaded``: group ranks, least loaded first;
    ``by_rows``: whether row-wise and table-row-wise are among them
    (:func:`plait.workloads.dlrm.cost.rows_ok`)."""
    out = [Placement(table.name, "table_wise", (r,)) for r in range(group)]
    for k in (2, 4):
        if k < group and table.dim % k == 0:
            out.append(Placement(table.name, "column_wise", tuple(sorted(loaded[:k]))))
    if group > 1:
        out.append(Placement(table.name, "row_wise", tuple(range(group))))
        out.append(Placement(table.name, "data_parallel", tuple(range(group))))
    if 1 < node < group:
        out += [Placement(table.name, "table_row_wise", tuple(range(n * node, (n + 1) * node)))
                for n in range(group // node)]
    if group == 1 and not fused_width_ok("table_wise", table.dim):
        out.append(Placement(table.name, "data_parallel", (0,)))
    return [o for o in out if fused_width_ok(o.sharding, table.dim // len(o.ranks) if o.sharding == "column_wise"
                                             else table.dim) and (by_rows or "row_wise" not in o.sharding)]


def plan_tables(spec: DlrmSpec, cluster: Cluster, world: int, batch: int, group: int | None = None,
                memory_margin: float = 0.05) -> list[Placement]:
    """A placement of every table (module docstring); one-line error when no placement of a table fits."""
    group = group or world
    plans, refusal = [], None
    for least_work in (False, True):
        try:
            plans.append(_greedy(spec, cluster, world, batch, group, memory_margin, least_work))
        except ConfigError as error:
            refusal = error
    if not plans:
        assert refusal is not None
        raise refusal
    scored = [(estimate_dlrm(spec, p, cluster, world, batch, group), p) for p in plans]
    best = min(scored, key=lambda pair: (pair[0].step_s, pair[0].max_memory_bytes))[1]
    return _improve(spec, cluster, world, batch, group, memory_margin, best)


MOVE_ROUNDS = 50
"""At most this many accepted moves (each round tries every table's every option; a bound on the search time)."""


def _key(est: DlrmEstimate) -> tuple[float, float, float]:
    return est.step_s, sum(est.rank_time_s), est.max_memory_bytes


def _improve(spec: DlrmSpec, cluster: Cluster, world: int, batch: int, group: int, memory_margin: float,
             placed: list[Placement]) -> list[Placement]:
    """Steepest descent over single-table moves (module docstring); every plan tried fits in memory."""
    node = min(cluster.gpus_per_node, group)
    capacity = cluster.accelerator.memory_bytes * (1.0 - memory_margin)
    tables = {t.name: t for t in spec.tables}
    current = estimate_dlrm(spec, placed, cluster, world, batch, group)
    for _ in range(MOVE_ROUNDS):
        loaded = sorted(range(group), key=lambda r: (current.rank_time_s[r], r))
        best = None
        for i, place in enumerate(placed):
            for option in options(tables[place.table], group, node, loaded, rows_ok(spec, tables[place.table])):
                if option == place:
                    continue
                trial = [*placed[:i], option, *placed[i + 1:]]
                est = estimate_dlrm(spec, trial, cluster, world, batch, group)
                if est.max_memory_bytes <= capacity and _key(est) < _key(best[0] if best else current):
                    best = (est, trial)
        if best is None:
            return placed
        current, placed = best
    return placed


def _greedy(spec: DlrmSpec, cluster: Cluster, world: int, batch: int, group: int, memory_margin: float,
            least_work: bool) -> list[Placement]:
    """One pass (module docstring): each table where the slowest rank ends soonest, or (``least_work``) where it
    adds the least time over all ranks, on the least-loaded ranks."""
    node = min(cluster.gpus_per_node, group)
    capacity = cluster.accelerator.memory_bytes * (1.0 - memory_margin)
    order = sorted(spec.tables, key=lambda t: -(t.pooling * 3 * t.dim * t.element_bytes + t.bytes / batch))
    placed: list[Placement] = []
    so_far = None  # the estimate of the tables placed so far: the previous table's chosen one
    for table in order:
        done = {p.table for p in placed}
        sub = replace(spec, tables=tuple(t for t in spec.tables if t.name in done | {table.name}))
        loaded, before = list(range(group)), 0.0
        if so_far is not None:  # column-wise shards (and, by work, table-wise ones) go to the least-loaded ranks
            loaded.sort(key=lambda r: (so_far.rank_time_s[r], r))
            before = sum(so_far.rank_time_s)
        tried = options(table, group, node, loaded, rows_ok(spec, table))
        if least_work:
            tried = [o for o in tried if o.sharding != "table_wise" or o.ranks == (loaded[0],)]
        best = None
        for option in tried:
            est = estimate_dlrm(sub, [*placed, option], cluster, world, batch, group)
            if est.max_memory_bytes > capacity:
                continue
            key = ((sum(est.rank_time_s) - before) if least_work else est.step_s, est.max_memory_bytes)
            if best is None or key < best[0]:
                best = (key, option, est)
        if best is None:
            raise ConfigError(f"table {table.name} ({table.bytes / 2**30:.1f} GiB) fits no placement on {group} ranks "
                              f"of {cluster.accelerator.memory_bytes / 2**30:.0f} GiB beside the tables placed before it")
        placed.append(best[1])
        so_far = best[2]
    return placed
