"""Run a search: enumerate, prune by named rules, cost the survivors in chunks, rank.

Costing happens in chunks (:mod:`plait.search.parts`, in this process or a pool) so that a progress callback can
report and Ctrl-C can stop the search with the best plans found so far (the result says it was interrupted).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from plait.cost.batch import BatchResult
from plait.cost.energy import step_energy_batch
from plait.cost.estimate import Estimate
from plait.cost.inner import Known
from plait.engine.capability import reasons as engine_reasons
from plait.engine.capability import unsupported_index
from plait.engine.engine import Engine
from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.job import Job
from plait.plan.array_ops import ARRAY
from plait.plan.columns import PlanColumns
from plait.plan.plan import Plan
from plait.predict.estimate import assemble
from plait.predict.intervals import bounds, spread
from plait.search.chunks import hidden_at_most, runs_chunks, search_chunks
from plait.search.enumerate import layout_sizes
from plait.search.parts import KEPT_MISSES, POOL_MIN_CANDIDATES, Part, available_cores, pool_parts, search_part
from plait.search.refine import refine
from plait.search.rules import HOST_MEMORY_REASON, MEMORY_REASON, reason_table, row_figures
from plait.search.space import SearchSpace, for_engine
from plait.workload.model import ModelSpec

Progress = Callable[[int, int], None]
REFINE = 4
RANK_BY = ("p50", "p90")
"""What ``--rank-by`` ranks the plans of one GPU count by."""
RANKINGS = (*RANK_BY, "energy")
"""What a search can rank by: ``RANK_BY``, or ``energy`` (tokens per joule, the objective energy's)."""


@dataclass
class SearchResult:
    """Verdicts of every candidate and the costed feasible ones."""

    model: ModelSpec
    cluster: Cluster
    space: SearchSpace
    num_candidates: int
    engine: Engine
    """The engine plans are ranked for; options it cannot run are pruned with their reason."""
    reasons: Counter[str] = field(default_factory=Counter)
    """Infeasible candidates per reason."""
    costed: int = 0
    """Candidates that reached the cost model."""
    feasible: list[tuple[PlanColumns, BatchResult, np.ndarray]] = field(default_factory=list)
    """(columns, results, row indices that fit) per costed chunk: its candidates that fit and its
    :data:`~plait.search.parts.KEPT_MISSES` nearest misses."""
    elapsed_s: float = 0.0
    interrupted: bool = False
    rank_by: str = "p50"
    """``p50``: rank by the predicted step time; ``p90``: by its 90% bound (:mod:`plait.predict.intervals`), the plan
    that is fast even if the prediction is wrong as the development runs show it can be; ``energy``: by the joules of
    a step (:func:`plait.cost.energy.step_energy_batch`), the plan that trains on the least energy."""
    _ranking: list[tuple[float, int, int]] | None = None

    def _steps(self, result: BatchResult, rows: np.ndarray) -> np.ndarray:
        """What a step costs in the ranking, of ``rows`` of ``result``: its time, or its joules (``energy``)."""
        if self.rank_by == "energy":
            assert self.cluster.power is not None, "checked by run_search"
            return step_energy_batch({k: v[rows] for k, v in result.time.items()}, self.space.gpus, self.cluster.power)
        step = result.step_time_s[rows]
        if self.rank_by == "p50":
            return step
        width = spread({k: v[rows] for k, v in result.time.items()}, self.model.moe is not None, ARRAY)
        return bounds(step, width, xp=ARRAY)[1]

    @property
    def num_feasible(self) -> int:
        """Candidates that fit."""
        return sum(len(rows) for _, _, rows in self.feasible)

    @property
    def candidates_per_s(self) -> float:
        """Candidates given a verdict per second of wall time."""
        return self.num_candidates / self.elapsed_s if self.elapsed_s else float("inf")

    def ranking(self) -> list[tuple[float, int, int]]:
        """(tokens/s, or tokens/J ranked by energy, over the steps multiplier, chunk, row) of every feasible candidate, best first."""
        if self._ranking is None:
            figures, chunks, indices = [np.zeros(0)], [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
            for chunk, (cols, result, rows) in enumerate(self.feasible):
                if not len(rows):
                    continue
                tps = cols["global_batch"][rows] * cols["seq_len"][rows] / self._steps(result, rows)
                if cols["dp_sync"][rows].any():  # all-reduce-equivalent tokens (steps multipliers)
                    tps = tps / row_figures(cols.take(rows))[0]
                figures.append(np.asarray(tps, dtype=np.float64))
                chunks.append(np.full(len(rows), chunk, dtype=np.int64))
                indices.append(np.asarray(rows, dtype=np.int64))
            tps, chunk_of, row_of = (np.concatenate(x) for x in (figures, chunks, indices))
            order = np.argsort(-tps, kind="stable")  # ties keep the chunks' order, as a stable sort of the list
            self._ranking = list(zip(tps[order].tolist(), chunk_of[order].tolist(), row_of[order].tolist()))
        return self._ranking

    def top(self, k: int) -> list[Estimate]:
        """The ``k`` fastest feasible plans as estimates: ranked by the closed forms, the best
        ``REFINE x k`` assembled with every pipeline re-timed by the simulation (:func:`plait.predict.estimate.assemble`
        with ``simulate=True``: only these few, where the closed forms' drift could reorder the ranking), of which
        those that cannot be among the ``k`` are not simulated (:mod:`plait.search.refine`). Where the engine runs
        chunked collectives, each of the ``k`` then takes its fastest ``overlap_chunks``
        (:func:`plait.search.chunks.with_best_chunks`) and they are ranked again."""
        rows = [(self.feasible[chunk][1], row) for _, chunk, row in self.ranking()[:REFINE * k]]
        # the bound that skips simulations is on throughput: ranked by the 90% bound, every plan is simulated
        # and so is not a bound on energy
        out = refine(self.model, self.cluster, self.engine, rows, k if self.rank_by == "p50" else len(rows))
        if runs_chunks(self.engine):  # overlap_chunks searched over the plans that can still rank
            kept = {e.plan for e in out}  # (refine leaves out pool plans that cannot rank unchunked)
            out = search_chunks(self._ordered(out), k, self.model, self.cluster, self.engine,
                                lambda kth: self._chunk_candidates(kth, kept))
        return self._ordered(out)[:k]

    def _chunk_candidates(self, kth_tokens_per_s: float,
                          kept: set[Plan]) -> list[tuple[float, Callable[[], Estimate]]]:
        """Feasible TP or EP plans not in ``kept`` that hiding their TP and EP collectives would lift past
        ``kth_tokens_per_s`` (the closed forms): that bound, highest first, and a function assembling each as
        :meth:`top` assembles its plans."""
        found, overlap = [], self.cluster.accelerator.efficiency.comm_overlap.value
        for cols, result, rows in self.feasible:
            tokens = cols["global_batch"][rows] * cols["seq_len"][rows]
            hidden = hidden_at_most(result.time["tp_comm"][rows] + result.time["ep_comm"][rows], overlap)
            bound = tokens / np.maximum(result.step_time_s[rows] - hidden, 1e-12)
            chunkable = (cols["tp"][rows] > 1) | ((cols["ep"][rows] > 1) & (self.model.moe is not None))
            hits = np.flatnonzero((bound > kth_tokens_per_s) & chunkable)
            if not len(hits):
                continue
            twins = cols.take(rows[hits])  # as chunked: the engine's refusals of the combination (fp8, cp, MoE)
            twins = PlanColumns({**twins.data, "overlap_chunks": np.full(len(hits), 2, dtype=twins["overlap_chunks"].dtype)},
                                methods=twins.methods)
            runnable = unsupported_index(twins, self.model, self.engine) < 0
            found += [(float(b), result, int(r)) for b, r in zip(bound[hits][runnable], rows[hits][runnable])
                      if result.cols.plan(int(r)) not in kept]
        found.sort(key=lambda f: -f[0])
        return [(b, lambda result=result, row=row: refine(self.model, self.cluster, self.engine,
                                                          [(result, row)], 1)[0]) for b, result, row in found]

    def _ordered(self, out: list[Estimate]) -> list[Estimate]:
        """``out`` best first by :attr:`rank_by`."""
        if self.rank_by == "p90":  # tokens/s at the 90% bound, over the steps multiplier
            return sorted(out, key=lambda e: e.step_time_interval_s[1] * e.steps_multiplier / e.tokens_per_step)
        if self.rank_by == "energy":  # joules per all-reduce-equivalent token
            return sorted(out, key=lambda e: (e.energy_j(1.0) or 0.0, -e.target_tokens_per_s))
        return sorted(out, key=lambda e: -e.target_tokens_per_s)

    def best_per_method(self) -> dict[str, Estimate]:
        """The best ranked plan of each ``dp_sync`` method name tried, as closed-form estimates (best first)."""
        found: dict[str, tuple[BatchResult, int]] = {}
        for _, chunk, row in self.ranking():
            result = self.feasible[chunk][1]
            name = self.space.methods[int(result.cols["dp_sync"][row])].name
            found.setdefault(name, (result, row))
        return {name: self._estimate(result, row, simulate=False) for name, (result, row) in found.items()}

    def nearest_misses(self, k: int) -> list[Estimate]:
        """Costed plans that did not fit, smallest memory overflow first (for 'what would make it fit')."""
        assert k <= KEPT_MISSES, f"a search keeps the {KEPT_MISSES} nearest misses of each chunk"
        misses = []
        for chunk, (cols, result, rows) in enumerate(self.feasible):
            over = result.memory["total"] / self.cluster.accelerator.memory_bytes
            fits = np.zeros(len(over), dtype=bool)
            fits[rows] = True
            for row in np.argsort(np.where(fits, np.inf, over), kind="stable")[:k]:
                if not fits[row]:
                    misses.append((float(over[row]), chunk, int(row)))
        misses.sort()
        return [self._estimate(self.feasible[c][1], r, simulate=False) for _, c, r in misses[:k]]

    def _estimate(self, result: BatchResult, row: int, *, simulate: bool) -> Estimate:
        """Row ``row`` of ``result`` as an estimate (:func:`plait.predict.estimate.assemble`; the row passed the plan
        rules as a batch row)."""
        job = Job.checked(self.model, self.cluster, result.cols.plan(row), self.engine)
        return assemble(job, result, row, simulate=simulate)


def run_search(model: ModelSpec, cluster: Cluster, space: SearchSpace, *, engine: Engine,
               progress: Progress | None = None, workers: int | None = None, rank_by: str = "p50",
               known: Known | None = None) -> SearchResult:
    """Search ``space`` for ``engine``: candidates the engine cannot run are pruned with the option named; Ctrl-C
    returns what was costed so far. ``workers`` processes search pieces of the space (:mod:`plait.search.parts`;
    default: every core for spaces of at least :data:`~plait.search.parts.POOL_MIN_CANDIDATES`, else this process);
    ``progress`` is called with (candidates given a verdict, candidates in the space). ``known``: per-layer quantities
    of earlier searches of the same model, cluster and engine, filled with this one's (:class:`plait.cost.inner.Known`:
    each depends on its combination of inner knobs alone, not on the GPU count; searched in this process, ``workers`` 1)."""
    start = time.perf_counter()
    space = for_engine(space, engine)
    # the candidates in all: counted ahead only where a choice or a progress display needs it (the one-process
    # search counts them as it enumerates, :func:`plait.search.parts.search_part`)
    total = -1 if workers == 1 and progress is None else sum(layout_sizes(model, space))
    if workers is None:  # ``known`` lives in this process: its search stays here
        workers = available_cores() if total >= POOL_MIN_CANDIDATES and known is None else 1
    if workers < 1:
        raise ConfigError(f"workers={workers} must be >= 1")
    assert known is None or workers == 1, "a search's per-layer quantities are shared within one process only"
    if rank_by not in RANKINGS:
        raise ConfigError(f"rank_by={rank_by!r} must be one of {', '.join(RANKINGS)}")
    if rank_by == "energy" and cluster.power is None:
        raise ConfigError(f"cluster {cluster.name} states no power figures (a 'power' table or an accelerator tdp_w), "
                          "so plans cannot be ranked by energy")
    result = SearchResult(model=model, cluster=cluster, space=space, num_candidates=total, engine=engine,
                          rank_by=rank_by)
    done = Part(num_candidates=0, reasons=Counter(), costed=0, chunks=[])
    report = (lambda n: progress(n, total)) if progress else None
    try:
        if workers == 1:
            search_part(model, cluster, space, engine, report, done, known)
        else:
            verdicts = [0]  # candidates of the parts the workers have returned, in any order

            def completed(part: Part) -> None:
                verdicts[0] += part.num_candidates
                if report:
                    report(verdicts[0])

            for part in pool_parts(model, cluster, space, engine, workers, completed):
                _merge(done, part)
    except KeyboardInterrupt:
        result.interrupted = True
    order = {name: i for i, name in enumerate(reason_table() + engine_reasons(engine))}  # verdict codes; memory last
    order[MEMORY_REASON] = len(order)
    order[HOST_MEMORY_REASON] = len(order) + 1
    refused = len(order) + 2  # the cost model's refusals (plait.search.parts.costed), after memory, as they came
    result.reasons = Counter(dict(sorted(done.reasons.items(), key=lambda item: order.get(item[0], refused))))
    result.costed = done.costed
    if total < 0:  # its enumeration's count (or, interrupted, counted now)
        result.num_candidates = sum(layout_sizes(model, space)) if result.interrupted else done.num_candidates
    result.num_candidates += done.twins  # the swapping twins made where memory binds (plait.search.parts.swap_twins)
    if progress and not result.interrupted:  # the twins, made during the search, join the space's count at its end
        progress(result.num_candidates, result.num_candidates)
    result.feasible = [(batch.cols, batch, rows) for batch, rows in done.chunks]
    result.elapsed_s = time.perf_counter() - start
    return result


def _merge(into: Part, part: Part) -> None:
    into.num_candidates += part.num_candidates
    into.reasons.update(part.reasons)
    into.costed += part.costed
    into.chunks += part.chunks
    into.twins += part.twins
