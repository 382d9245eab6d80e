"""DreamDDP's profiled schedule: which units of layers to average at which of the H local steps so that their
all-reduces hide behind the backward pass (Tang et al., arXiv 2502.11058; its artifact trl730109/DreamDDP,
``Scheduling/dreamddp_scheduling.py``, ``determine_comm_schedule``).

The timing model (the artifact's): in every step the whole backward pass runs, unit by unit in backpropagation
order (``backward_s[k]`` each); the units a step averages form one contiguous run in that order, and unit ``k``'s
all-reduce starts once its gradient is ready (the end of its backward, ``sum(backward_s[:k + 1])``) and after the
previous unit's all-reduce (one at a time, ``comm_s[k]`` each). What runs past the end of the backward pass is
exposed: the optimizer step waits for it. Over a period of H steps every unit is averaged once.

The choice. The artifact searches it depth first: each step takes the next units while their all-reduces end
within the backward pass; at the first that would not, it tries both sending it now (paying the overrun) and
leaving it to the next step, and the last step takes all that remain; it keeps the least total exposed time.
plait solves the same minimisation exactly by dynamic programming over (first unit of the step, steps left), the
cut after each unit tried: the optimum is never worse than the depth-first search's, which explores a subset of
the same cuts. Ties go to the step that sends more units, as the artifact's branch prefers sending now.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from functools import cache


def exposed_run_s(backward_s: Sequence[float], comm_s: Sequence[float], start: int, end: int) -> float:
    """Seconds the all-reduces of units ``start .. end - 1`` (backprop order) run past the end of the backward
    pass of every unit (module docstring; 0 for an empty run)."""
    ready, clock = list(itertools.accumulate(backward_s)), 0.0
    for k in range(start, end):
        clock = max(clock, ready[k]) + comm_s[k]
    return max(0.0, clock - (ready[-1] if ready else 0.0)) if end > start else 0.0


def _runs_table(backward_s: Sequence[float], comm_s: Sequence[float]) -> list[list[float]]:
    """``table[start][end]``: :func:`exposed_run_s` of every run, each start's ends in one pass (``O(L^2)``)."""
    ready = list(itertools.accumulate(backward_s))
    end_of_pass, units = (ready[-1] if ready else 0.0), len(comm_s)
    table = [[0.0] * (units + 1) for _ in range(units + 1)]
    for start in range(units):
        clock = 0.0
        for k in range(start, units):
            clock = max(clock, ready[k]) + comm_s[k]
            table[start][k + 1] = max(0.0, clock - end_of_pass)
    return table


def profiled_schedule(backward_s: Sequence[float], comm_s: Sequence[float], every: int) -> tuple[list[int], float]:
    """(step of the period, 0 .. ``every`` - 1, at which each unit is averaged; total exposed seconds over the
    period) of the least exposed schedule (module docstring). Units in backpropagation order."""
    if len(backward_s) != len(comm_s) or every < 1:
        raise ValueError(f"{len(backward_s)} backward times, {len(comm_s)} all-reduce times, every={every}")
    units, table = len(comm_s), _runs_table(backward_s, comm_s)

    @cache
    def best(start: int, left: int) -> tuple[float, int]:
        """(least exposed seconds for units ``start ..`` over ``left`` steps, end of this step's run)."""
        if left == 1 or start == units:
            return table[start][units], units
        options = [(table[start][end] + best(end, left - 1)[0], -end) for end in range(start, units + 1)]
        cost, end = min(options)
        return cost, -end

    steps, start = [0] * units, 0
    for step in range(every):
        _, end = best(start, every - step)
        steps[start:end] = [step] * (end - start)
        start = end
    return steps, best(0, every)[0]
