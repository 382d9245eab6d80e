"""First fit of jobs into the GPUs left, in order: the walk SRTF, LAS (:mod:`plait.schedule.policies`) and the
elastic policy's smallest sizes (:mod:`plait.schedule.elastic_alloc`) share."""

from __future__ import annotations

import numpy as np


def greedy_fit(gpus: np.ndarray, budget: int) -> tuple[np.ndarray, int, int]:
    """Walk ``gpus`` in order, taking each that fits the GPUs left: (positions taken, positions walked, GPUs left).
    Runs of jobs that fit together are taken by one cumulative sum, a job too large is skipped to the next that
    fits."""
    taken, at = [], 0
    while budget > 0 and at < len(gpus):
        held = np.cumsum(gpus[at:])
        run = int(np.searchsorted(held, budget, side="right"))
        if run:
            taken.append(np.arange(at, at + run))
            budget -= int(held[run - 1])
            at += run
            continue
        fits = np.flatnonzero(gpus[at:] <= budget)
        at = at + int(fits[0]) if len(fits) else len(gpus)
    return (np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64)), at, budget
