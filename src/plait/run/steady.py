"""A run's steady step time from each rank's per-step seconds: the slowest rank's per step (the ranks wait for it at
their collectives), the median over the steps after the warm-up (a process's first steps page in its memory and
fill its caches). Torch-free: the CLI's renderers and the benchmarks read it."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

WARMUP_STEPS = 2
"""Steps left out at the start (assumed: the first two steps page in the data and the allocator's pools; later
steps of plait's CPU workers settle to within the machine's noise)."""


def steady_s(per_rank: Sequence[Sequence[float]], warmup: int = WARMUP_STEPS) -> float:
    """The median over the steps after ``warmup`` (all of them where there are no more) of the slowest rank's
    seconds of each step."""
    slowest = [max(step) for step in zip(*per_rank, strict=True)]
    return statistics.median(slowest[warmup:] if len(slowest) > warmup else slowest)
