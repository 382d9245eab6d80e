"""Where a 2-D or 2.5-D tensor-parallel grid wins a search, and why (the planner's ``tp grids`` line).

A grid (:mod:`plait.cost.tp2d`) moves ``T k/(q d) + k n/q`` bytes per linear layer and rank against Megatron 1-D's
``T k`` whatever ``tp`` is: it wins where the TP group's traffic is what binds (a group spanning a slow tier, or a
large group on any tier) and loses where the weight blocks it broadcasts outweigh the activations it saves
(small micro-batches, fast tiers). A 2.5-D grid keeps ``d`` copies of each weight block, so it loses where memory
binds. Engine ``plait`` runs a grid as the whole job (:mod:`plait.run.tp2d_train`), so its searches hold grids; the
engines plait exports to do not, and ``plait plan --tp-grids`` costs them there anyway, as a what-if.
"""

from __future__ import annotations

import math
from dataclasses import replace

from plait.engine.catalog import get_engine
from plait.engine.engine import Engine
from plait.search.runner import SearchResult
from plait.search.space import TP_GRIDS
from plait.units import GIB


def what_if(engine: Engine) -> Engine:
    """``engine`` as if it ran grids (its ``tp_grid`` refusal dropped): the search then costs and ranks them."""
    return replace(engine, unsupported={k: v for k, v in engine.unsupported.items() if k != "tp_grid"})


def makes_grid(tp: int) -> bool:
    """Whether ``tp`` makes one of the default grids (``q*q*d``, ``q >= 2``)."""
    return any(tp % d == 0 and math.isqrt(tp // d) >= 2 and math.isqrt(tp // d) ** 2 * d == tp for _, d in TP_GRIDS)


def grid_verdict(result: SearchResult) -> str | None:
    """One line on the grids of ``result``: not searched (and why), none feasible, or the best grid against the best
    1-D plan with their TP time and the tier the TP group spans. ``None`` where no searched ``tp`` makes a grid."""
    if not any(makes_grid(t) for t in result.space.tp):
        return None
    refused = get_engine(f"{result.engine.name}@{result.engine.version}").unsupported.get("tp_grid")
    if not result.space.tp_grids:
        return (f"not searched: {result.engine.name} does not run 2-D/2.5-D tensor parallelism "
                "(`plait plan --tp-grids` costs them as a what-if)")
    best: dict[bool, tuple[int, int]] = {}
    flat_by_tp: dict[int, tuple[int, int]] = {}  # the best 1-D plan of each tp
    for _, chunk, row in result.ranking():
        cols = result.feasible[chunk][0]
        tp, grid = int(cols["tp"][row]), bool(cols["tp_mode"][row] != 0)
        best.setdefault(grid, (chunk, row))
        if not grid:
            flat_by_tp.setdefault(tp, (chunk, row))
        grid_tp = int(result.feasible[best[True][0]][0]["tp"][best[True][1]]) if True in best else 0
        if grid_tp in flat_by_tp:
            break
    same_tp = flat_by_tp.get(grid_tp) if True in best else None
    what = f" (what-if: {result.engine.name} does not run grids)" if refused else ""
    if True not in best:
        return f"no grid plan is feasible (the reasons above){what}"
    grid_text, grid_s = _describe(result, *best[True])
    if False not in best:
        return f"only grids are feasible: best {grid_text}{what}"
    flat_text, flat_s = _describe(result, *best[False])
    if grid_s < flat_s:
        return f"a grid wins, {100 * (1 - grid_s / flat_s):.0f}% faster: {grid_text} against 1-D {flat_text}{what}"
    text = f"1-D wins: {flat_text}; the best grid is {100 * (grid_s / flat_s - 1):.0f}% slower: {grid_text}"
    if same_tp is not None and same_tp != best[False]:
        same_text, same_s = _describe(result, *same_tp)
        gain = 100 * (same_s / grid_s - 1)
        text += (f"; at its tp the best 1-D plan is {same_text}: the grid is {abs(gain):.0f}% "
                 f"{'faster' if gain >= 0 else 'slower'} there")
    return text + what


def _describe(result: SearchResult, chunk: int, row: int) -> tuple[str, float]:
    """(the plan, its step, TP time and memory, and the tier its TP group spans; its step seconds)."""
    cols, batch, _ = result.feasible[chunk]
    plan = cols.plan(row)
    step = float(batch.step_time_s[row])
    tier = result.cluster.tiers[result.cluster.tier_index(plan.tp)].name
    memory = float(batch.memory["total"][row]) / GIB
    return (f"{plan.describe()} {step:.3g} s/step (TP {float(batch.time['tp_comm'][row]):.3g} s, TP group over "
            f"{tier}; {memory:.1f} GiB)", step)
