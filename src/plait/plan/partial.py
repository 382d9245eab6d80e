"""Which parameters DreamDDP's partial synchronization averages at which step of its period (000-19).

DreamDDP (Tang et al., arXiv 2502.11058; its artifact trl730109/DreamDDP, ``dist_trainer_transformer_final.py``)
is local SGD in which every layer's parameters are averaged once per period of H steps, each at its own step, and
a layer's all-reduce is launched from its gradient hook during the backward pass, so it overlaps the backward of
the layers below; the optimizer step waits for the step's all-reduces. The artifact assigns layers to steps by a
depth-first search over profiled per-layer backward and all-reduce times.

``schedule=profiled`` runs that search on the cost model's per-unit times (:mod:`plait.plan.partial_profiled`,
:mod:`plait.cost.partial_times`). The default, ``schedule=even``, assigns them without times, so that the cost
model and the runtime agree on every step's bytes from the model alone: the units (the output head with the final norm, each block, the embeddings) in backpropagation
order are cut into H contiguous runs of about equal parameter count, each unit going to the step its midpoint
falls in. Like the artifact's schedules, a run may be empty when H exceeds the number of units.
"""

from __future__ import annotations

import math
from typing import Any

from plait.plan.ops import Ops
from plait.workload.tensors import Shape

HEAD, EMBEDDINGS = "head", "embeddings"


def unit_of(name: str) -> str:
    """The unit a parameter belongs to: ``layers.N``, ``head`` (final norm, output) or ``embeddings``."""
    if name.startswith("layers."):
        return ".".join(name.split(".")[:2])
    return EMBEDDINGS if name.endswith("embeddings.weight") else HEAD


def _backprop_key(unit: str) -> tuple[int, int]:
    if unit == HEAD:
        return (0, 0)
    if unit == EMBEDDINGS:
        return (2, 0)
    return (1, -int(unit.split(".")[1]))


def units_in_backprop_order(named: list[tuple[str, Shape]]) -> list[str]:
    """The units of ``named`` in the order the backward pass finishes them: the head, the last block .. the first,
    the embeddings."""
    return sorted({unit_of(name) for name, _ in named}, key=_backprop_key)


def schedule(named: list[tuple[str, Shape]], every: int) -> dict[str, int]:
    """Step of the period (0 .. ``every`` - 1) at which each unit of ``named`` (the whole model's parameters, as
    :func:`plait.workload.tensors.parameter_shapes` lists them) is averaged."""
    sizes: dict[str, int] = {}
    for name, shape in named:
        unit = unit_of(name)
        sizes[unit] = sizes.get(unit, 0) + math.prod(shape)
    total, before, steps = sum(sizes.values()), 0, {}
    for unit in sorted(sizes, key=_backprop_key):
        steps[unit] = min(every - 1, int(every * (before + sizes[unit] / 2) / total))
        before += sizes[unit]
    return steps


def step_elements(named: list[tuple[str, Shape]], every: int, step: int) -> int:
    """Parameter elements averaged at ``step`` (counted from 0)."""
    steps = schedule(named, every)
    return sum(math.prod(s) for n, s in named if steps[unit_of(n)] == step % every)


def exposed_s(reduce: Any, backward: Any, every: int, xp: Ops) -> Any:
    """Mean exposed seconds per step of the schedule's all-reduces, for a whole period's all-reduce time
    ``reduce`` and one (the last) micro-batch's backward ``backward``, per row.

    Run ``k`` of ``H`` covers the fraction ``[k/H, (k+1)/H)`` of the backward pass in backprop order; its
    all-reduces take ``R/H`` and start as its first gradients are ready, at ``k B / H``; what runs past the end of
    the backward, ``max(0, (R - j B) / H)`` with ``j = H - k``, is exposed (the optimizer waits for it). Over the
    period, with ``n = min(H, ceil(R / B) - 1)`` positive terms: ``(n R - B n (n + 1) / 2) / H^2`` per step."""
    ratio = xp.where(backward > 0, reduce / xp.maximum(backward, 1e-30), float(every))
    n = xp.minimum(float(every), xp.maximum(xp.ceil(ratio) - 1.0, 0.0))
    return (n * reduce - backward * n * (n + 1.0) / 2.0) / float(every * every)
