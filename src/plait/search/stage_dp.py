"""The dynamic program over stages of :mod:`plait.search.stage_program`: layers and choice per stage minimising
1F1B's closed form ``m * max_s t_s + (p - 1) * mean_s t_s`` (Narayanan et al. 2021, Sec. 2.2.2) plus the longest
stage tail, under each stage's memory.

As in Alpa's inter-operator pass (Zheng et al., OSDI 2022, arXiv 2201.12023, Sec. 5.2) the slowest stage's time is
enumerated: every bound ``T`` (each distinct ``t``), in ascending order, and for each a program over stages and
layers used so far keeps the least summed time of stages whose ``t <= T`` and whose memory fits (Galvatron, Miao et
al., VLDB 2023, arXiv 2211.13878, Sec. 4); the enumeration stops once the busy term ``m * T`` alone costs more than
the best found. The programs of a block of bounds run as one numpy pass (over bounds, the layer counts a stage may
take and layers used); a bound under which the stages' layer counts cannot sum to the model's is skipped, as its
program finds nothing. :func:`sharded_program` enumerates the longest tail the same way, one :func:`program` under
each.
"""

from __future__ import annotations

from typing import Any

import numpy as np

MODES = ("none", "selective", "full")
TIE = 1e-9
"""Relative weight of a stage's distance from the even split in the program's sum: it breaks ties only."""
BLOCK = 4
"""Bounds of the first block each program solves at once, each next block twice as many (assumed: the busy term
stops most programs within their first few dozen bounds; a block costs one vectorized pass however many it holds)."""


def sharded_program(t: np.ndarray, fits: np.ndarray, tail: np.ndarray, counts: np.ndarray, num_layers: int,
                     m: int, ceiling: float = np.inf) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """Layers and choice per stage minimising ``m max t + (p - 1) mean t + max tail``: as the program's slowest
    stage, the longest tail is enumerated (Alpa's bound, Sec. 5.2, over each choice's tail), the program run over
    the choices within it, and the least sum kept (``None`` where none costs less than ``ceiling``)."""
    best: tuple[float, tuple[int, ...], tuple[int, ...]] | None = None
    fastest = t[fits].min(initial=np.inf)
    for bound in _distinct(tail):
        if m * fastest + bound >= (ceiling if best is None else best[0]):
            break  # every later bound costs more than the best found, even with the fastest stages
        within = tail <= bound
        limit = ceiling if best is None else min(best[0], ceiling)
        found = program(t, fits & within, counts, num_layers, m, choices=len(tail), ceiling=limit - tail.min())
        if found is None:
            continue
        layers, picks = found
        times = [t[s, counts.tolist().index(n), k] for s, (n, k) in enumerate(zip(layers, picks))]
        cost = m * max(times) + (t.shape[0] - 1) * sum(times) / t.shape[0] + max(tail[k] for k in picks)
        if cost < ceiling and (best is None or cost < best[0]):
            best = (cost, layers, picks)
    return None if best is None else (best[1], best[2])


def program(t: np.ndarray, fits: np.ndarray, counts: np.ndarray, num_layers: int, m: int,
             choices: int = 0, ceiling: float = np.inf) -> tuple[tuple[int, ...], tuple[Any, ...]] | None:
    """Layers and mode per stage minimising ``m max t + (p - 1) mean t`` (module docstring), or ``None`` (also where
    none costs less than ``ceiling``); with ``choices``, the index of each stage's choice along ``t``'s last axis
    rather than its mode. The bounds are tried in ascending order, a block of them per vectorized program
    (:func:`_programs`), until the busy term alone costs more than the best found; a bound under which the layer
    counts the stages may take cannot sum to the model's is skipped (its program finds nothing)."""
    p = t.shape[0]
    bounds = _distinct(t[fits])
    if bounds.size == 0:
        return None
    # ties (sums equal to the float) go to the split nearest the even one: it moves no parameters between stages
    tie = TIE * t[fits].max() * np.abs(counts - num_layers / p)
    bounds = bounds[_reachable(t, fits, counts, num_layers, bounds)]
    best: tuple[float, tuple[int, ...], tuple[Any, ...]] | None = None
    start, size = 0, BLOCK
    while start < bounds.size:
        block = bounds[start:start + size]
        if m * block[0] >= (ceiling if best is None else best[0]):
            break
        for bound, found in zip(block, _programs(t, fits, counts, num_layers, block, tie)):
            if m * bound >= (ceiling if best is None else best[0]):
                return None if best is None else (best[1], best[2])  # every later bound costs more in its busy term
            if found is None:
                continue
            layers, picked = found
            times = [t[s, j, k] for s, (j, k) in enumerate(zip(layers, picked))]
            cost = m * max(times) + (p - 1) * sum(times) / p
            if cost < ceiling and (best is None or cost < best[0]):
                best = (cost, tuple(int(counts[j]) for j in layers),
                        tuple(int(k) if choices else MODES[int(k)] for k in picked))
        start, size = start + size, 2 * size
    return None if best is None else (best[1], best[2])


def _reachable(t: np.ndarray, fits: np.ndarray, counts: np.ndarray, num_layers: int, bounds: np.ndarray) -> np.ndarray:
    """Per bound, whether the least and the most layers the stages may take under it (some choice within the bound
    and fitting) bracket the model's: where not, no split sums to it."""
    fastest = np.where(fits, t, np.inf).min(axis=2)  # (stage, count): the fastest fitting choice
    allowed = fastest <= bounds[:, None, None]  # (bound, stage, count)
    least = np.where(allowed, counts, num_layers + 1).min(axis=2).sum(axis=1)
    most = np.where(allowed, counts, -1).max(axis=2)
    return (least <= num_layers) & (most.min(axis=1) >= 0) & (most.sum(axis=1) >= num_layers)


def _programs(t: np.ndarray, fits: np.ndarray, counts: np.ndarray, num_layers: int, bounds: np.ndarray,
              tie: np.ndarray) -> list[tuple[list[int], list[int]] | None]:
    """For each bound ``T`` of ``bounds``, the program over stages and layers used so far: the layer-count index and
    choice per stage of least summed ``t`` (plus ``tie``) among stages whose ``t <= T`` and that fit (``None``: no
    split of the model's layers), vectorized over bounds, a stage's layer counts that fit and the layers used that
    can lie on a split; ties go to the first count. The bounds must be reachable (:func:`_reachable`)."""
    cheapest = np.where(fits & (t <= bounds[:, None, None, None]), t, np.inf)  # (bound, stage, count, choice)
    mode_of = cheapest.argmin(axis=3)  # per bound, stage and layer count, the fastest choice that is allowed
    stage_t = cheapest.min(axis=3) + tie
    ats = [np.flatnonzero(fits[s].any(axis=1)) for s in range(t.shape[0])]  # the counts each stage may take
    fewest, most = np.cumsum([counts[at].min() for at in ats]), np.cumsum([counts[at].max() for at in ats])
    total = np.full((len(bounds), num_layers + 1), np.inf)
    total[:, 0] = 0.0
    steps = []
    for s, at in enumerate(ats):
        # layers used after stage s: reachable from none and leaving the later stages a count they may take
        low = max(fewest[s], num_layers - (most[-1] - most[s]))
        high = min(most[s], num_layers - (fewest[-1] - fewest[s]))
        before = np.arange(low, high + 1) - counts[at, None]  # (count, used): layers used before the stage
        valid = before >= 0
        moved = np.where(valid, total[:, np.where(valid, before, 0)] + stage_t[:, s, at, None], np.inf)
        total = np.full((len(bounds), num_layers + 1), np.inf)
        total[:, low:high + 1] = moved.min(axis=1)
        steps.append((at, moved, low))
    out: list[tuple[list[int], list[int]] | None] = []
    for b in range(len(bounds)):
        if not np.isfinite(total[b, num_layers]):
            out.append(None)
            continue
        layers, picked, left = [], [], num_layers
        for s in range(t.shape[0] - 1, -1, -1):
            at, moved, low = steps[s]
            j = int(at[moved[b, :, left - low].argmin()])
            layers.append(j)
            picked.append(int(mode_of[b, s, j]))
            left -= int(counts[j])
        out.append((layers[::-1], picked[::-1]))
    return out


def _distinct(values: np.ndarray) -> np.ndarray:
    """``values``' distinct entries, ascending (``np.unique``'s, without its first call's import of ``numpy.ma``)."""
    ordered = np.sort(values, axis=None)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))] if ordered.size else ordered
