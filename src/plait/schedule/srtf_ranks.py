"""SRTF's ranks of the running jobs, recomputed only for the jobs that may rank after the best waiting one.

A pass (:func:`plait.schedule.policies.preemptive_pass`) reads the running jobs' ranks (time left at the requested
size, ``max(0, R - v * max(0, t - t0)) / a``) only to place them among the waiting jobs (those ranked before the
first are kept) and to order a few. A job's tokens left never grow: while it runs they fall with the pass time
``t``, in floats too (every operation in the rank is monotone under IEEE rounding), and a stop keeps them as they
were at the stop (computed by the same operations, :class:`plait.schedule.columns.Columns`), which a restart starts
from; its yardstick ``a`` is fixed on arrival. So a rank computed at an earlier pass bounds the rank now from above,
and a running job whose bound is below the first waiting job's rank ranks before it now: the pass keeps it whatever
else it does, and its rank is not recomputed. The jobs a pass reads are those it would read with every rank
recomputed, and the schedule is the same, bit for bit (``tests/test_srtf_ranks.py``,
``benchmarks/schedule_identical.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from plait.schedule.simulate import Simulator


@dataclass
class RankBounds:
    """Per job, an upper bound of its rank (``inf`` where none is known yet)."""

    sim: Simulator | None = None
    """The simulation these bounds serve (reset for another)."""
    bound: np.ndarray = field(default_factory=lambda: np.empty(0))
    """Per trace position, the rank last computed for the job (``inf``: never)."""

    def serve(self, sim: Simulator) -> RankBounds:
        """These bounds, reset if they served another simulation."""
        if self.sim is not sim:
            self.sim, self.bound = sim, np.full(len(sim.states), np.inf)
        return self

    def may_trail(self, sim: Simulator, now_s: float, idx: np.ndarray, first_rank: float) -> tuple[np.ndarray,
                                                                                                   np.ndarray]:
        """(the running jobs of ``idx`` whose rank at ``now_s`` may be ``first_rank`` or more, in ``idx``'s order;
        their ranks at ``now_s``); the others rank below ``first_rank``."""
        running = idx[self.bound[idx] >= first_rank]
        rank = sim.columns.remaining(running, now_s)  # a new array: divided in place
        rank /= sim.columns.asked_tokens_per_s[running]
        self.bound[running] = rank
        return running, rank

