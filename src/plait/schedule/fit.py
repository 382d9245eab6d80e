"""First fit of jobs into the GPUs left, in order: the walk SRTF (:mod:`plait.schedule.policies`) and the elastic
policy's smallest sizes and growth steps (:mod:`plait.schedule.elastic_alloc`) share (LAS walks the same way over a
tree, :mod:`plait.schedule.las`)."""

from __future__ import annotations

import numpy as np


def greedy_fit(gpus: np.ndarray, budget: int) -> tuple[np.ndarray, int, int]:
    """Walk ``gpus`` in order, taking each that fits the GPUs left: (positions taken, positions walked, GPUs left).
    Runs of jobs that fit together are taken by one cumulative sum; at a job too large, the jobs still ahead are
    narrowed to those that fit the GPUs left (the GPUs left only shrink, so no other will fit later), and the walk
    goes on among them."""
    taken, at, ahead = [], 0, np.arange(len(gpus))
    while budget > 0 and len(ahead):
        held = np.cumsum(gpus if len(ahead) == len(gpus) else gpus[ahead])
        run = int(np.searchsorted(held, budget, side="right"))
        if run:
            taken.append(ahead[:run])
            budget -= int(held[run - 1])
            at, ahead = int(ahead[run - 1]) + 1, ahead[run:]
            continue
        ahead = ahead[gpus[ahead] <= budget]
    walked = at if budget == 0 else len(gpus)
    return (np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64)), walked, budget
