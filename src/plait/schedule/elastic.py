"""Elastic resizing: every job's GPU count is chosen anew at each pass to maximise the cluster's summed speedup,
each job replanned by plait at its new size.

After Pollux (Qiao et al., OSDI 2021: reallocate periodically to maximise the sum of jobs' goodput speedups) and Sia
(Jayaram Subramanya et al., SOSP 2023: the same over sizes a job's profile predicts). A job's options are its
requested size times 2^k (k from -2 to ``log2 max_scale``) at which a plan fits; its speed at each is plait's
planner's (:class:`plait.schedule.speed.SpeedModel`), so a resize is a replan. The allocation: every job in arrival
order gets its smallest option while GPUs remain (the rest wait); then the step with the largest gain in
``tokens_per_s(size) / tokens_per_s(requested)`` per added GPU is taken, greedily, while GPUs remain (marginal gains
fall with size, so greedy steps approximate the optimum, as Pollux's own heuristic search does). A running job is
shrunk or stopped when the allocation says so; it is grown only when the time saved at the larger size exceeds its
restart (:attr:`plait.schedule.speed.Speed.restart_s`). Pollux's statistical efficiency (batch-size tuning) is not
modelled: every size trains the same global batch.

Passes run at arrivals and completions only. Pollux also reallocates on a 60 s period because its goodput model
learns as jobs run; plait's speeds are fixed per job and size, so a pass between events would repeat the last one:
the allocation depends only on the active jobs, the free GPUs and their fragments change only at events, and a
growth not worth its restart stays so as the remaining work shrinks (the time saved, ``left (1/old - 1/new)``,
falls with ``left``). A periodic pass only cost time: a job of centuries (a user's token budget) took one pass per
period.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from plait.schedule.elastic_alloc import ChainTable, allocate_into
from plait.schedule.simulate import Simulator
from plait.schedule.speed import Speed
from plait.schedule.state import JobState


@dataclass(frozen=True, kw_only=True)
class Elastic:
    """Pollux/Sia-style elastic resizing."""

    max_scale: int = 4
    """Largest size offered, as a multiple of the requested one (assumed; Pollux bounds a job by the cluster)."""
    name: str = "elastic"
    """Policy name."""
    speedups: dict[int, dict[int, float]] = field(default_factory=dict, compare=False, repr=False)
    """Per job index: its sizes and consolidated speed there over its speed at the requested size (filled on first
    use; one policy object serves one simulation)."""
    speeds: dict[int, dict[int, Speed]] = field(default_factory=dict, compare=False, repr=False)
    """Per job index: its plan's speed at each of its sizes, consolidated (filled with :attr:`speedups`)."""
    steps: dict[int, dict[int, tuple[float, int]]] = field(default_factory=dict, compare=False, repr=False)
    """Per job index: from each size, (minus its gain per added GPU, the next size), where the next size gains."""
    shapes: dict[tuple[str, int], tuple[dict[int, float], dict[int, Speed], dict[int, tuple[float, int]]]] = field(
        default_factory=dict, compare=False, repr=False)
    """Per (model, requested GPUs): :attr:`speedups`, :attr:`speeds` and :attr:`steps` of every such job (they
    depend on nothing else: the planner's answers are fixed per model and size), shared by those jobs."""
    table: ChainTable = field(default_factory=ChainTable, compare=False, repr=False)
    """Per job index: its smallest size and growth steps as arrays (:mod:`plait.schedule.elastic_alloc`)."""

    def options(self, sim: Simulator, st: JobState) -> dict[int, float]:
        """Sizes ``st`` may run at, smallest first, with their speedup over its requested size."""
        found = self.speedups.get(st.index)
        if found is None:
            shape = (st.job.model, st.job.gpus)
            if shape not in self.shapes:
                self.shapes[shape] = self._shape_options(sim, st)
            found, self.speeds[st.index], self.steps[st.index] = self.shapes[shape]
            self.speedups[st.index] = found
        return found

    def _shape_options(self, sim: Simulator, st: JobState) -> tuple[dict[int, float], dict[int, Speed],
                                                                     dict[int, tuple[float, int]]]:
        """:meth:`options`, the speeds and the growth steps of every job of ``st``'s model and requested size."""
        asked, top = st.job.gpus, sim.pool.capacity_gpus
        sizes = {asked >> k for k in range(3) if asked >> k >= 1 and (asked >> k) << k == asked}
        sizes |= {asked << k for k in range(1, self.max_scale.bit_length()) if asked << k <= min(top, asked * self.max_scale)}
        base = sim.speed_at(st, asked)
        assert base is not None, "a job that fits nowhere is rejected on arrival"
        speeds = {s: sim.speed_at(st, s) for s in sorted(sizes)}
        options = {s: v.tokens_per_s / base.tokens_per_s for s, v in speeds.items() if v is not None}
        steps = {now: (-(options[nxt] - options[now]) / (nxt - now), nxt)
                 for now, nxt in itertools.pairwise(options) if options[nxt] > options[now]}
        return options, {s: v for s, v in speeds.items() if v is not None}, steps

    def allocate(self, sim: Simulator, order: np.ndarray) -> np.ndarray:
        """The jobs given GPUs (the others wait), for the active job indices ``order`` in order of arrival (each
        recorded on arrival, :meth:`joined_queue`), their sizes written to ``self.table.allocated``; computed over
        arrays (:func:`plait.schedule.elastic_alloc.allocate_into`, the same choices as the greedy this class
        states)."""
        return allocate_into(self.table, order, sim.pool.capacity_gpus)

    def joined_queue(self, sim: Simulator, st: JobState) -> None:
        """The simulator's word that ``st`` waits: on arrival, its smallest size and growth steps join the
        allocation's table (where they sit depends only on their keys, so recording a job here or at the pass that
        first sees it gives the same table, without a pass filtering every active job for new ones)."""
        table = self.table
        table.grow_to(len(sim.states))
        if not table.smallest[st.index]:
            table.set(st.index, next(iter(self.options(sim, st))), self.steps[st.index])

    def completed(self, sim: Simulator, st: JobState) -> None:
        """The simulator's word that ``st`` completed: its growth steps leave the allocation's table."""
        if st.index < len(self.table.smallest) and self.table.smallest[st.index]:
            self.table.remove(st.index)

    def _stopping(self, sim: Simulator, moved: np.ndarray, size_of: np.ndarray, now_s: float) -> list[JobState]:
        """Of the running jobs ``moved`` (allocated a size other than theirs), those to stop, in their order: every
        one to shrink, and every one to grow where the time its work left saves at the new size exceeds the
        restart. One job's stop changes no other's answer, so each is asked in turn before any stops; a pass moves
        a few jobs (2.7 on average in the default benchmark), so a Python loop over their states costs less than
        numpy calls over columns (the same float operations: :class:`plait.schedule.columns.Columns`)."""
        stop = []
        for index, size in zip(moved.tolist(), size_of[moved].tolist(), strict=True):
            st = sim.running[index]
            if size > st.gpus:
                new, left = self.speeds[index][size], st.remaining(now_s)
                assert st.speed is not None, "a running job has a speed"
                if not left / new.tokens_per_s + new.restart_s < left / st.speed.tokens_per_s:
                    continue
            stop.append(st)
        return stop

    def schedule(self, sim: Simulator, now_s: float) -> None:
        """Reallocate: shrink or stop, grow where it pays, start waiting jobs largest first."""
        jobs = self.allocate(sim, sim.active_indices())
        size_of = self.table.allocated  # zero outside ``jobs`` until the end of the pass (``restore``)
        running, _ = sim.running_rows()  # a view, read before any job stops
        moved = running[size_of[running] != sim.columns.gpus[running]]  # only these can stop, in running order
        for st in self._stopping(sim, moved, size_of, now_s):
            sim.stop(st, now_s)
        # Allocated jobs holding no GPUs wait (one allocated nothing stays waiting).
        starting = jobs[sim.columns.gpus[jobs] == 0]
        # Largest allocation first, then by arrival and trace position (one key, ``arrival_rank``: unique); a pass
        # starts a few jobs, so Python sorts them for less than numpy's calls cost.
        given, ranks = size_of[starting].tolist(), sim.columns.arrival_rank[starting].tolist()
        for _, _, index, allocated in sorted(zip([-n for n in given], ranks, starting.tolist(), given, strict=True)):
            st = sim.states[index]
            sizes = [s for s in self.options(sim, st) if s <= allocated]
            for size in reversed(sizes):  # the fragments may not hold the allocated size: the largest that fits
                place = sim.pool.packed(size)
                if place is not None:
                    sim.start(st, place, now_s)
                    break
        self.table.restore()
