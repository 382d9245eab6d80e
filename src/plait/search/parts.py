"""A search in parts: the declared space cut into contiguous pieces, each enumerated, pruned and costed on its own,
in this process or in a pool of worker processes, the pieces' verdicts streamed back in order.

A piece is one tensor-parallel degree with a contiguous run of its pipeline degrees, so the pieces in order
enumerate exactly the candidates of the whole space in the whole space's order, and the ranking (a stable sort
by throughput) is the same whatever the number of workers. Costed chunks keep their fitting candidates and the
:data:`KEPT_MISSES` nearest misses (what the planner reports of the rest), so little crosses between processes.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace

import numpy as np

from plait.cost.batch import BatchResult, evaluate_batch, peak_memory
from plait.cost.inner import Known, inner_columns
from plait.cost.inner_values import Inner
from plait.cost.params import stage_layer_counts
from plait.cost.prepared import Prepared, prepare, take_rows
from plait.cost.swap import resident_activation_bytes
from plait.engine.capability import reasons as engine_reasons
from plait.engine.capability import unsupported_index
from plait.engine.engine import Engine
from plait.engine.facts import EngineFacts
from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns
from plait.search.enumerate import layout_sizes, layouts
from plait.search.factored import pruned
from plait.search.rules import ENGINE_CODE, HOST_MEMORY_REASON, MEMORY_CODE, prune, reason_table
from plait.search.space import SearchSpace
from plait.workload.model import ModelSpec

CHUNK = 65536
"""Candidates costed in one batch."""
KEPT_MISSES = 16
"""Non-fitting candidates kept per costed chunk, the least over memory first (``nearest_misses`` needs a few)."""
POOL_MIN_CANDIDATES = 4_000_000
"""Spaces at least this large are searched by a pool of every core when ``workers`` is not given. Measured on the
2-core machine of this project (2026-12-07, load 0.3, two workers against one process alternating, medians of 3
wall times; ``python benchmarks/plan_workers.py`` for the 405B rows): Llama 3.1 405B on dgx-h100-ib, 0.64M-1.9M
candidates 0.84-0.94x (forking the workers and shipping their costed chunks back eat the gain), 3.8M 1.08-1.11x,
5.8M 1.18x, 7.7M 1.22-1.28x; Llama 3 70B on 1,024 GPUs 0.63M 0.87x, 2.5M 0.98x; DeepSeek-V3 on 2,048 GPUs 5.8M
1.18x, 23M 1.63x. The pool costs 1.5-2x the CPU time of one process at every size."""

Chunk = tuple[BatchResult, np.ndarray]
"""A costed chunk (its candidates that fit and the nearest misses) and the rows of it that fit."""


@dataclass
class Part:
    """The verdicts of one piece of the space."""

    num_candidates: int
    reasons: Counter[str]
    costed: int
    chunks: list[Chunk]
    twins: int = 0
    """Candidates made during the search: the swapping twins of plans that do not fit (:func:`swap_twins`)."""


def split(model: ModelSpec, space: SearchSpace, pieces: int) -> list[SearchSpace]:
    """``space`` cut into about ``pieces`` contiguous sub-spaces of similar candidate counts (a piece never spans
    two tensor-parallel degrees)."""
    sizes: Counter[tuple[int, int]] = Counter()
    for (tp, pp, _), n in zip(layouts(space), layout_sizes(model, space), strict=True):
        sizes[(tp, pp)] += n
    target = max(1, sum(sizes.values()) // max(1, pieces))
    out = []
    for tp in space.tp:
        run: list[int] = []
        count = 0
        for pp in space.pp:
            run.append(pp)
            count += sizes[(tp, pp)]
            if count >= target:
                out.append(replace(space, tp=(tp,), pp=tuple(run)))
                run, count = [], 0
        if run:
            out.append(replace(space, tp=(tp,), pp=tuple(run)))
    return out


def _keep(batch: BatchResult, fits: np.ndarray) -> Chunk:
    """The fitting rows of ``batch`` and its :data:`KEPT_MISSES` nearest misses, with the fitting rows' index."""
    misses = np.flatnonzero(~fits)
    nearest = misses[_smallest(batch.memory["total"][misses], KEPT_MISSES)]
    kept = np.sort(np.concatenate([np.flatnonzero(fits), nearest]))
    return batch.take(kept), np.flatnonzero(fits[kept])


def search_part(model: ModelSpec, cluster: Cluster, space: SearchSpace, engine: Engine,
                progress: Callable[[int], None] | None = None, part: Part | None = None,
                known: Known | None = None) -> Part:
    """Enumerate, prune and cost one piece (``progress``: called with the candidates verdicted so far; ``part``:
    filled as chunks are costed, so that an interrupted search keeps what it has; ``known``: the per-layer
    quantities of earlier searches of the same model, cluster and framework, filled with this one's)."""
    names = reason_table() + engine_reasons(engine)
    part = part if part is not None else Part(num_candidates=0, reasons=Counter(), costed=0, chunks=[])
    reads = None if known is None else known.rule_reads
    cols, found, enumerated = pruned(model, cluster, space, engine, reads)  # only the survivors are built
    part.reasons.update({names[c]: n for c, n in sorted(found.items())})
    part.num_candidates += enumerated
    if not len(cols):
        return part
    limit = cluster.accelerator.memory_bytes * (1.0 - space.memory_margin)
    dropped = enumerated - len(cols)
    known = Known() if known is None else known  # per-layer quantities costed in earlier chunks (or searches)
    for begin in range(0, len(cols), CHUNK):
        chunk = cols.take(slice(begin, begin + CHUNK))  # views of the columns, not copies
        costed_rows, fits, sizes = _cost(model, cluster, chunk, engine.framework, limit, names, part, known)
        if space.swap_activations:  # each twin verdicted and costed once, as a candidate of its own
            twins = swap_twins(costed_rows, fits, lambda rows: fewest_swapped_layers(
                model, sizes.take(rows), limit))  # type: ignore[union-attr]  # rows exist only where sizes do
            if twins is not None:
                part.twins += len(twins)
                search_cols(model, cluster, space, engine, twins, part, known)
        part.costed += len(chunk)
        if progress:
            progress(dropped + part.costed)
    return part


@dataclass(frozen=True)
class PeakSizes:
    """Per costed row, what :func:`fewest_swapped_layers` reads of its peak stage: the memory total, the
    micro-batches in flight, the stage and the per-layer quantities."""

    cols: PlanColumns
    total: np.ndarray
    inflight: np.ndarray
    stage: np.ndarray
    inner: Inner

    def take(self, rows: np.ndarray) -> PeakSizes:
        """Rows ``rows``."""
        return PeakSizes(self.cols.take(rows), self.total[rows], self.inflight[rows], self.stage[rows],
                         take_rows(self.inner, rows))

    @staticmethod
    def of(cols: PlanColumns, memory: dict[str, np.ndarray], stage: np.ndarray, inner: Inner) -> PeakSizes:
        """The sizes :func:`plait.cost.batch.peak_memory` found (its ``memory`` and ``stage``) of ``cols``."""
        return PeakSizes(cols, np.asarray(memory["total"]), np.asarray(memory["inflight"]), np.asarray(stage), inner)


def peak_sizes(model: ModelSpec, cluster: Cluster, cols: PlanColumns, framework: EngineFacts,
               known: Known | None = None) -> PeakSizes:
    """:class:`PeakSizes` of ``cols``, their memory costed alone (:func:`_memory_view`)."""
    view = _memory_view(model, cluster, cols, framework, known)
    memory, stage = peak_memory(model, cluster, view)
    return PeakSizes.of(cols, memory, stage, view.inner)


def _cost(model: ModelSpec, cluster: Cluster, cols: PlanColumns, framework: EngineFacts, limit: float,
          names: list[str], part: Part, known: Known | None) -> tuple[PlanColumns, np.ndarray, PeakSizes | None]:
    """``cols`` costed into ``part``, their memory screened first (:func:`screened`): (the rows costed, those of
    ``cols`` but those the cost model refused, the mask of them that fit in device memory, and their peak stages'
    sizes, ``None`` where no row was costed)."""
    screen = screened(model, cluster, cols, framework, limit, known)
    if screen is not None:  # the plans that cannot fit and cannot be kept as near misses are not timed
        batch, rows, over, sizes = screen
        part.reasons[names[MEMORY_CODE]] += len(over)
        _collect(part, batch, limit, names, cluster)
        fits = np.zeros(len(cols), dtype=bool)
        fits[rows] = batch.memory["total"] <= limit
        return cols, fits, sizes
    batches = costed(model, cluster, cols, framework, part.reasons, known)
    for batch in batches:
        _collect(part, batch, limit, names, cluster)
    if not batches:
        return cols.take(slice(0, 0)), np.zeros(0, dtype=bool), None
    kept = PlanColumns.concat([b.cols for b in batches])
    if len(batches) == 1:
        sizes = PeakSizes.of(kept, batches[0].memory, batches[0].memory_stage, batches[0].prepared.inner)
    else:  # batches costed apart (a refused row bisected out): their rows' memory again, as one
        sizes = peak_sizes(model, cluster, kept, framework, known)
    return kept, np.concatenate([b.memory["total"] <= limit for b in batches]), sizes


def _collect(part: Part, batch: BatchResult, limit: float, names: list[str], cluster: Cluster) -> None:
    """A costed batch into ``part``: its rows that fit in device and (for swapped activations) host memory, and its
    nearest misses; the misses counted under their reasons."""
    fits = batch.memory["total"] <= limit
    host = fits & (batch.memory["host_activations"] > cluster.host_memory_bytes_per_gpu)
    part.reasons[names[MEMORY_CODE]] += int((~fits).sum())
    if host.any():
        part.reasons[HOST_MEMORY_REASON] += int(host.sum())
    part.chunks.append(_keep(batch, fits & ~host))


def swap_twins(cols: PlanColumns, fits: np.ndarray,
               layers: Callable[[np.ndarray], np.ndarray] | None = None) -> PlanColumns | None:
    """The rows of a costed chunk that do not fit with every activation on the device (``recompute='none'``, not
    swapping), with ``swap_activations`` on (``None``: no such row). Swapping only trades time for activation
    memory (:mod:`plait.cost.swap`), so a plan that fits without it cannot gain from it (dominance): the space
    tries it only where memory binds, and the search stays as large as before where it does not. ``layers``: the
    ``swap_layers`` of the twins of rows ``rows`` of ``cols`` (:func:`fewest_swapped_layers`; ``None``: every saved
    tensor, -1)."""
    rows = np.flatnonzero(~fits & cols.is_("recompute", "none") & ~cols["swap_activations"])
    if not len(rows):
        return None
    twins = cols.take(rows)
    data = {**twins.data, "swap_activations": np.ones(len(rows), dtype=bool)}
    if layers is not None:
        data["swap_layers"] = layers(rows)
    return PlanColumns(data, methods=twins.methods)


def fewest_swapped_layers(model: ModelSpec, sizes: PeakSizes, limit: float) -> np.ndarray:
    """Per row of ``cols`` (plans that keep every activation), the fewest leading layers whose swapped activations
    bring its peak stage under ``limit`` bytes, or -1 (every saved tensor) where that is all of a stage's layers.
    Swapping more layers only adds copies (:mod:`plait.cost.swap`: each layer's exposed copy time, the same compute),
    so the fewest that fit dominate the rest. A swapped layer frees its activations in every micro-batch in flight
    but two layers stay resident (:func:`plait.cost.swap.resident_activation_bytes`); counted at the smallest layer
    kind's bytes against the largest kind's two resident layers, the count is never too small (the twin is costed
    exactly after: one that still misses is counted as not fitting). ``sizes``: the rows' peak stages, as costed
    without swapping (:class:`PeakSizes`)."""
    cols = sizes.cols
    n_dense, n_moe = stage_layer_counts(model, cols["pp"], sizes.stage, cols.xp)
    dense, moe = sizes.inner.kinds
    smallest = np.minimum(np.where(n_dense > 0, dense.activation_bytes, np.inf),
                          np.where(n_moe > 0, moe.activation_bytes, np.inf))
    resident = resident_activation_bytes(sizes.inner, n_dense, n_moe, cols.xp)  # every layer swapped: two stay
    with np.errstate(divide="ignore", invalid="ignore"):
        needed = np.ceil((sizes.total - limit + resident) / (sizes.inflight * smallest))
    count = np.maximum(needed, 1)
    stage_layers = -(-model.num_layers // cols["pp"])  # the rule swap-layers-fit's bound
    partial = np.isfinite(count) & (count < np.minimum(n_dense + n_moe, stage_layers))
    return np.where(partial, count, -1).astype(np.int64)


def search_cols(model: ModelSpec, cluster: Cluster, space: SearchSpace, engine: Engine, cols: PlanColumns,
                part: Part, known: Known | None = None) -> None:
    """Verdict and cost the candidates ``cols`` (made during the search) into ``part``, as :func:`search_part` does
    the enumerated ones (``known``: the search's per-layer quantities so far, :func:`screened`)."""
    names = reason_table() + engine_reasons(engine)
    verdict = prune(cols, model, cluster, space)
    refused = unsupported_index(cols, model, engine)
    verdict = np.where((verdict < 0) & (refused >= 0), ENGINE_CODE + refused, verdict)
    codes, counts = np.unique(verdict[verdict >= 0], return_counts=True)
    part.reasons.update({names[c]: int(n) for c, n in zip(codes, counts)})
    survivors = np.flatnonzero(verdict < 0)
    if not len(survivors):
        return
    limit = cluster.accelerator.memory_bytes * (1.0 - space.memory_margin)
    _cost(model, cluster, cols.take(survivors), engine.framework, limit, names, part, known)
    part.costed += len(survivors)


def screened(model: ModelSpec, cluster: Cluster, cols: PlanColumns, framework: EngineFacts, limit: float,
             known: Known | None = None) -> tuple[BatchResult, np.ndarray, np.ndarray, PeakSizes] | None:
    """``cols`` costed with their memory first: (the batch of the rows that may fit or be kept as a near miss, their
    indices in ``cols``, the indices of the other rows, which do not fit, and every row's peak stage sizes), or
    ``None`` where the cost model refuses a row (then :func:`costed`
    finds it). Most costed candidates do not fit (61% for 405B on 16,384 GPUs), and their step times are never
    read: :func:`_keep` keeps the fitting rows and the :data:`KEPT_MISSES` nearest misses. An all-reduce row's
    memory is its stages' peak (:func:`plait.cost.batch.peak_memory`); other methods add their buffers, so those
    rows are all timed. Timing the rows that may fit plus the all-reduce rows that are the nearest misses keeps
    what :func:`_keep` keeps, with the same figures (every figure is a function of its own row): a row left out
    has at least :data:`KEPT_MISSES` kept misses before it in (memory, position) order. ``known``: the per-layer
    quantities of the search's earlier chunks (:func:`plait.cost.inner.inner_columns`), each combination costed once."""
    try:
        view = _memory_view(model, cluster, cols, framework, known)
        memory, stage = peak_memory(model, cluster, view)
        peak = memory["total"]
        timed_rows = (peak <= limit) | (cols["dp_sync"] != 0)
        over = np.flatnonzero(~timed_rows)
        timed_rows[over[_smallest(peak[over], KEPT_MISSES)]] = True  # the nearest misses
        rows = np.flatnonzero(timed_rows)
        timed = cols.take(rows)  # prepared again from the kept combinations: FSDP and hop times for these rows only
        batch = evaluate_batch(model, cluster, timed, framework,
                               prepared=prepare(model, cluster, timed, framework, known),
                               peak=({k: v[rows] for k, v in memory.items()}, stage[rows]))
    except ConfigError:
        return None
    return batch, rows, np.flatnonzero(~timed_rows), PeakSizes.of(cols, memory, stage, view.inner)


def _smallest(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` smallest of ``values``, smallest first, ties in their order: ``np.argsort(values,
    kind="stable")[:k]``, sorting only the values up to the ``k``-th smallest (``np.partition`` finds it)."""
    if len(values) > k:
        kth = np.partition(values, k - 1)[k - 1]
        if not np.isnan(kth):  # NaN sorts last: then every value is sorted, as argsort does
            candidates = np.flatnonzero(values <= kth)
            return candidates[np.argsort(values[candidates], kind="stable")[:k]]
    return np.argsort(values, kind="stable")[:k]


def _memory_view(model: ModelSpec, cluster: Cluster, cols: PlanColumns, framework: EngineFacts,
                 known: Known | None) -> Prepared:
    """What :func:`plait.cost.batch.peak_memory` reads of :func:`plait.cost.prepared.prepare`'s result: the columns
    with the sequence filled and their per-layer quantities (the per-row FSDP, hop and swap times, which it does not
    read, are left out: only the rows that may fit are timed)."""
    data = dict(cols.data)
    data["seq_len"] = np.where(cols["seq_len"] > 0, cols["seq_len"], model.seq_len)  # as prepare fills it
    filled = PlanColumns(data, methods=cols.methods)
    inner = inner_columns(model, cluster, filled, framework, known, sized=True)
    return Prepared(cols=filled, inner=inner, fsdp=(), p2p_s=0.0, framework=framework)  # type: ignore[arg-type]


def costed(model: ModelSpec, cluster: Cluster, cols: PlanColumns, framework: EngineFacts,
           refused: Counter[str], known: Known | None = None) -> list[BatchResult]:
    """``cols`` costed as one batch, or, where the cost model refuses the batch (a :class:`ConfigError` of one of
    its rows), as batches of its halves, halved again until each refused row stands alone and is dropped with its
    message counted in ``refused``.

    A batch is vectorized and knows no row that raised, so the search catches at the batch and bisects only a
    batch that failed: the happy path costs each chunk in one call, as before, and ``k`` refused rows of a chunk
    of ``n`` cost about ``2 k log2(n)`` smaller batches. Screening the rows first would need every rule the cost
    model may raise on restated as a vectorized pruning rule (:mod:`plait.search.rules`); the rules that can be
    stated ahead are already there, so what reaches this is a defect or a limit the rules do not know yet.
    ``known``: the search's per-layer quantities so far (:func:`screened`)."""
    try:
        return [evaluate_batch(model, cluster, cols, framework,
                               prepared=prepare(model, cluster, cols, framework, known))]
    except ConfigError as error:
        if len(cols) == 1:
            refused[str(error)] += 1
            return []
    rows = np.arange(len(cols))
    half = len(cols) // 2
    return (costed(model, cluster, cols.take(rows[:half]), framework, refused, known)
            + costed(model, cluster, cols.take(rows[half:]), framework, refused, known))


def available_cores() -> int:
    """CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def pool_parts(model: ModelSpec, cluster: Cluster, space: SearchSpace, engine: Engine, workers: int,
               completed: Callable[[Part], None] | None = None) -> Iterator[Part]:
    """The parts of ``space``, searched by ``workers`` processes, yielded in order (closing the iterator, e.g. on
    Ctrl-C, cancels the rest); ``completed`` hears each part in this process as soon as a worker returns it, in
    the order they finish (a progress display's count)."""
    pieces = split(model, space, 4 * workers)
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method)) as pool:
        futures: list[Future[Part]] = [pool.submit(search_part, model, cluster, piece, engine) for piece in pieces]
        index = {future: i for i, future in enumerate(futures)}
        ready: dict[int, Part] = {}
        following = 0
        try:
            for future in as_completed(futures):
                ready[index[future]] = part = future.result()
                if completed is not None:
                    completed(part)
                while following in ready:
                    yield ready.pop(following)
                    following += 1
        finally:
            for future in futures:
                future.cancel()