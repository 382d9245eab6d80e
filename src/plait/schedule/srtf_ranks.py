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

The bounds ride beside the running jobs in the order they started (:meth:`Simulator.running_rows`), so a pass reads
them as one slice. A job starts with its queue key's time left as its bound: the rank it had when it last stopped
or arrived, computed by the same operations, which its rank while it runs never exceeds.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from plait.schedule.simulate import Simulator
    from plait.schedule.state import JobState


def may_trail(sim: Simulator, now_s: float, first_rank: float) -> tuple[np.ndarray, np.ndarray]:
    """(the running jobs whose rank at ``now_s`` may be ``first_rank`` or more, in the order they started; their
    ranks at ``now_s``); the others rank below ``first_rank``. Their bounds are lowered to those ranks."""
    idx, bound = sim.running_rows()
    at = (bound >= first_rank).nonzero()[0]
    running = idx[at]
    rank = sim.columns.rank(running, now_s)
    bound[at] = rank
    return running, rank


@dataclass
class Arrivals:
    """The jobs that arrived since SRTF's last pass, and whether any job completed since (one simulation's).

    After a pass the running jobs are exactly those its first fit took, so a first fit at that instant takes them
    again. Until the next event only time passes: running ranks fall and waiting ones stay, so each running job
    keeps every waiting job it ranked before behind it. If then only jobs arrive, and their GPUs together fit the
    GPUs free, the first fit takes the running jobs and the arrivals and nothing else: a running job finds at least
    the free GPUs plus its own less the arrivals' left; an arrival at least the free GPUs less the other
    arrivals'; a job that waited finds no more than it found at the last pass, which was too few. So such a pass
    starts the arrivals in rank order and reads no rank (``tests/test_srtf_ranks.py``)."""

    sim: Simulator | None = None
    """The simulation this log serves (reset for another)."""
    jobs: list[JobState] = field(default_factory=list)
    """Jobs that joined the queue since the last pass (between passes only arrivals join it)."""
    quiet: bool = True
    """No job completed since the last pass."""

    def serve(self, sim: Simulator) -> Arrivals:
        """This log, reset if it served another simulation."""
        if self.sim is not sim:
            self.sim, self.jobs, self.quiet = sim, [], True
        return self

    def fit_free(self, sim: Simulator) -> list[JobState] | None:
        """The arrivals in rank order if they are the only change since the last pass and fit the GPUs free
        together (the pass only starts them), else ``None``."""
        if not (self.quiet and self.jobs) or sum(st.job.gpus for st in self.jobs) > sim.pool.free_gpus:
            return None
        return sorted(self.jobs, key=lambda st: st.queued_key)

    def first_change(self, sim: Simulator) -> int:
        """Where in the ranked queue a pass need begin: at the first arrival when only jobs arrived since the last
        pass (0 otherwise). Before it the first fit goes as at the last pass: it takes the running jobs ranked there
        (they fit together) and no waiting job (each finds no more GPUs than it found then); so it reaches the
        first arrival with the free GPUs plus those of the running jobs ranked after it."""
        if not (self.quiet and self.jobs):
            return 0
        return bisect.bisect_left(sim.ranked, min(st.queued_key for st in self.jobs))

    def passed(self) -> None:
        """A pass is over: nothing has changed since."""
        self.jobs, self.quiet = [], True
