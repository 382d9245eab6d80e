"""Simulate one step of one pipeline: every rank's compute stream and communication stream.

Each rank runs its operation order (:mod:`plait.simulate.schedules`) strictly in sequence,
each operation once its input has arrived — as ``torch.distributed.pipelining``'s runtime
executes its per-rank action list, waiting on each receive right before the compute that
needs it. Per operation the durations come from the estimator (:mod:`plait.simulate.costs`);
activations and gradients travel between neighbouring stages with the point-to-point time
on the edge; after a rank's last backward, its data-parallel gradient buckets (one per
layer, ready as the last backward passes that layer) are reduced on its communication
stream, then the optimizer steps. The step ends when the slowest rank ends.

An operation starts at ``max(end of the rank's previous operation, arrival of its input)``, whatever order
simultaneous events are taken in, so the ranks are swept in dependency order — each rank runs ahead until
it waits for an input another rank has not produced yet — with no event queue: the same times as an event
simulation of these rules (``tests/test_simulate.py`` keeps one on :mod:`plait.events.kernel` and checks
them equal to the last bit), at a fraction of its cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from plait.frozen import direct_init
from plait.kept import Kept
from plait.simulate.periodic import periodic_sweep, unrolled_order
from plait.simulate.steady import WarmUp, steady_sweep, warm_up
from plait.simulate.straight import written_out
from plait.simulate.sweep_order import _steps, _sweep_order


@dataclass(frozen=True)
class Span:
    """One interval on one rank's stream."""

    rank: int
    stream: str
    kind: str
    start: float
    end: float
    micro_batch: int = -1
    chunk: int = 0


@direct_init
@dataclass(frozen=True, kw_only=True)
class PipelineCosts:
    """Durations the simulation needs, per rank (all chunks of a rank alike)."""

    p: int
    m: int
    v: int
    schedule: str
    forward_s: list[float]
    """Forward of one micro-batch through one chunk, per rank."""
    backward_s: list[float]
    """Backward (with recomputation) of one micro-batch through one chunk, per rank."""
    weight_grad_s: list[float]
    """Part of ``backward_s`` that ZB-H1 runs as a separate W pass (unused by other schedules)."""
    p2p_s: float
    """Activation or gradient transfer between neighbouring stages."""
    grad_reduce_s: list[float]
    """Data-parallel gradient reduction per rank (0: none)."""
    param_gather_s: list[float]
    """ZeRO-1/2 weight all-gather per rank, hidden behind the next step's first forward when overlapped."""
    buckets: list[int]
    """Gradient buckets per rank (its layers)."""
    overlap_grad_reduce: bool
    optimizer_s: list[float]


@dataclass
class Timeline:
    """Spans of every rank and the step time."""

    spans: list[Span] = field(default_factory=list)
    step_time_s: float = 0.0
    pipeline_end_s: list[float] = field(default_factory=list)
    record: bool = True
    """Keep the spans (traces, pictures); an estimate needs only the end times."""

    def add(self, rank: int, stream: str, kind: str, start: float, end: float, micro_batch: int = -1,
            chunk: int = 0) -> None:
        """Record one span (nothing when ``record`` is off)."""
        if self.record:
            self.spans.append(Span(rank, stream, kind, start, end, micro_batch, chunk))


_KINDS = ("F", "B", "W")
Swept = tuple[list[float], list[tuple[float, float]]]
"""Every rank's end of the pipeline and (start, end) of its last backward: what a sweep gives."""
SweepKey = tuple[str, int, int, int, tuple[tuple[float, float, float], ...], tuple[float, float], bool]
"""What a sweep depends on: schedule, stages, micro-batches, virtual stages, durations, hops, extrapolated."""


def _durations(c: PipelineCosts) -> list[tuple[float, float, float]]:
    """(forward, backward, W) of each rank's operations: with a W of its own (ZB-H1), B is the input-gradient part."""
    zero_bubble = c.schedule == "zb-h1"
    return [(c.forward_s[r], c.backward_s[r] - (c.weight_grad_s[r] if zero_bubble else 0.0), c.weight_grad_s[r])
            for r in range(c.p)]


def warmed(c: PipelineCosts, swept: dict[SweepKey, Swept] | None = None) -> tuple[WarmUp, list[float]] | None:
    """The start of the sweep :func:`simulate_pipeline` takes with ``extrapolate`` (:func:`plait.simulate.steady.
    warm_up`, to pass it as ``warm``) and a lower bound on every rank's end of the pipeline from it: its end so far
    (exact) plus the durations of its operations still to run, one after another on the rank. None where that
    sweep has no such start (a pipeline small enough to replay written out, or without a steady state) or where
    ``swept`` (:func:`simulate_pipeline`'s) holds its sweep already."""
    durations = _durations(c)
    if (unrolled_order(c.schedule, c.p, c.m, c.v) is not None
            or (swept is not None and _sweep_key(c, durations, True) in swept)):
        return None
    took = [d for ranked in durations for d in ranked]
    warm = warm_up(c.schedule, c.p, c.m, c.v, took, (0.0, c.p2p_s))
    if warm is None:
        return None
    left = warm.left
    return warm, [warm.free[r] + sum(left[3 * r + k] * took[3 * r + k] for k in range(3)) for r in range(c.p)]


def _sweep_key(c: PipelineCosts, durations: list[tuple[float, float, float]], extrapolate: bool) -> SweepKey:
    """What a sweep's result depends on: the schedule's shape, every operation's duration, the hops, extrapolation."""
    return (c.schedule, c.p, c.m, c.v, tuple(durations), (0.0, c.p2p_s), extrapolate)


def simulate_pipeline(c: PipelineCosts, record: bool = True, extrapolate: bool = False,
                      swept: dict[SweepKey, Swept] | None = None, warm: WarmUp | None = None) -> Timeline:
    """Run the schedule (``record``: keep every span, not only the end times; ``extrapolate``, without ``record``:
    a deep pipeline's steady state extrapolated once it repeats, :mod:`plait.simulate.steady`, the same times up to
    rounding at a fraction of the cost; ``swept``, without ``record``: the sweeps done so far by their durations, to
    take a pipeline alike in every operation's duration from, and to add this one's to; ``warm``, with
    ``extrapolate``: :func:`warmed`'s start of the sweep, taken over). Without ``record``, ``swept`` and ``warm``
    (an estimate's), the end times are kept by every value of ``c`` they depend on (:data:`_ENDS`)."""
    if record or swept is not None or warm is not None:
        return _simulated(c, record, extrapolate, swept, warm)
    key = (c.schedule, c.p, c.m, c.v, tuple(c.forward_s), tuple(c.backward_s), tuple(c.weight_grad_s), c.p2p_s,
           tuple(c.grad_reduce_s), tuple(c.param_gather_s), tuple(c.buckets), c.overlap_grad_reduce,
           tuple(c.optimizer_s), extrapolate)
    step_time_s, ends = _ENDS.get(key, (), lambda: _ends(_simulated(c, False, extrapolate, None, None)))
    return Timeline(step_time_s=step_time_s, pipeline_end_s=list(ends), record=False)


_ENDS: Kept[tuple[float, tuple[float, ...]]] = Kept(256)
"""An estimate's simulated step time and every rank's end of the pipeline, by every value of the costs they depend
on (a pure function of them): a plan estimated again (a validation's or a benchmark's repeats) is not swept again."""


def _simulated(c: PipelineCosts, record: bool, extrapolate: bool, swept: dict[SweepKey, Swept] | None,
               warm: WarmUp | None) -> Timeline:
    """:func:`simulate_pipeline`, run."""
    timeline, p = Timeline(record=record), c.p
    hops = (0.0, c.p2p_s)
    durations = _durations(c)
    if record:
        free, last_backward = _sweep_recorded(c, durations, hops, timeline)
    else:
        key, done = None, None
        if swept is not None:  # the key only where a sweep may be found or kept
            key = _sweep_key(c, durations, extrapolate)
            done = swept.get(key)
        if done is None:
            done = _sweep(c, durations, hops, extrapolate, warm)
            if swept is not None and key is not None:
                swept[key] = done
        free, last_backward = done
    step_time_s = 0.0
    for r in range(p):
        end = _data_parallel(timeline, c, r, last_backward[r], free[r])
        if end > step_time_s:  # max(step_time_s, end), without the builtin's call
            step_time_s = end
    timeline.pipeline_end_s, timeline.step_time_s = list(free), step_time_s
    return timeline


def _sweep(c: PipelineCosts, durations: list[tuple[float, float, float]], hops: tuple[float, float],
           extrapolate: bool = False, warm: WarmUp | None = None) -> tuple[list[float], list[tuple[float, float]]]:
    """Every rank's end and (start, end) of its last backward: :func:`_sweep_recorded`'s arithmetic, in its order
    (:func:`_sweep_order`), without the spans (what an estimate needs, at a fraction of the cost)."""
    p = c.p
    took = [d for ranked in durations for d in ranked]  # 3 x rank + kind
    straight = written_out(c.schedule, p, c.m, c.v)  # a small pipeline's order written out as Python, once swept often
    if straight is not None:
        return straight(took, hops[1])
    unrolled = unrolled_order(c.schedule, p, c.m, c.v)  # a small pipeline's short-run order, written out
    if unrolled is None:  # a deep one's: its period replayed, or its steady state extrapolated
        periodic = (steady_sweep(c.schedule, p, c.m, c.v, took, hops, warm) if extrapolate
                    else periodic_sweep(c.schedule, p, c.m, c.v, took, hops))
        if periodic is not None:
            return periodic[0], list(zip(periodic[1], periodic[0], strict=True))
    steps, slots = unrolled if unrolled is not None else (_sweep_order(c.schedule, p, c.m, c.v),
                                                          2 * c.m * p * c.v + 2)
    arrival_s = [0.0] * slots
    free = [0.0] * p
    last_begin = [0.0] * p
    for r, duration, wait, fill, hop, last in steps:
        begin = free[r]
        arrival = arrival_s[wait]
        if arrival > begin:
            begin = arrival
        now = free[r] = begin + took[duration]
        arrival_s[fill] = now + hops[hop]
        if last:  # the rank's last backward (or W)
            last_begin[r] = begin
    return free, list(zip(last_begin, free, strict=True))


def _sweep_recorded(c: PipelineCosts, durations: list[tuple[float, float, float]], hops: tuple[float, float],
                    timeline: Timeline) -> tuple[list[float], list[tuple[float, float]]]:
    """Sweep the ranks in dependency order (module docstring), recording every compute span on ``timeline``."""
    p = c.p
    ranks = _steps(c.schedule, p, c.m, c.v)
    arrival_s = [-1.0] * (2 * c.m * p * c.v)  # -1: not yet known
    position, free = [0] * p, [0.0] * p
    last_backward = [(0.0, 0.0)] * p
    left = sum(len(steps) for steps in ranks)
    while left:
        progressed = False
        for r in range(p):
            steps, i, now, n, took = ranks[r], position[r], free[r], len(ranks[r]), durations[r]
            while i < n:
                kind, wait, fill, hop, micro, chunk = steps[i]
                begin = now
                if wait >= 0:
                    arrival = arrival_s[wait]
                    if arrival < 0:
                        break
                    if arrival > now:
                        begin = arrival
                now = begin + took[kind]
                if fill >= 0:
                    arrival_s[fill] = now + hops[hop]
                if kind:
                    last_backward[r] = (begin, now)
                timeline.add(r, "compute", _KINDS[kind], begin, now, micro, chunk)
                i += 1
            if i > position[r]:
                progressed, left = True, left - (i - position[r])
                position[r], free[r] = i, now
        assert progressed, f"schedule {c.schedule} deadlocks (p={p}, m={c.m}, v={c.v})"
    return free, last_backward


def _data_parallel(timeline: Timeline, c: PipelineCosts, r: int, last_backward: tuple[float, float],
                   pipeline_end: float) -> float:
    """Gradient buckets on the communication stream, then the optimizer; returns the rank's end."""
    begin, end = last_backward
    reduce, gather, record = c.grad_reduce_s[r], c.param_gather_s[r], timeline.record  # no span, no call to add
    comm = end
    if reduce > 0:
        n = max(c.buckets[r], 1)
        if c.overlap_grad_reduce:
            comm = _bucketed(timeline, r, begin, end, reduce, n)
        else:
            if record:
                timeline.add(r, "comm", "dp-reduce", end, end + reduce)
            comm = end + reduce
    finish = pipeline_end if pipeline_end > comm else comm  # max(comm, pipeline_end), without the builtin's call
    if gather > 0:
        exposed = gather if not c.overlap_grad_reduce else max(0.0, gather - c.forward_s[r])
        if record:
            timeline.add(r, "comm", "param-gather", finish, finish + exposed)
        finish += exposed
    if record:
        timeline.add(r, "compute", "optimizer", finish, finish + c.optimizer_s[r])
    return finish + c.optimizer_s[r]


def _bucketed(timeline: Timeline, r: int, begin: float, end: float, reduce: float, n: int) -> float:
    """End of rank ``r``'s ``n`` gradient buckets of ``reduce / n`` each, bucket ``k`` ready once the last backward
    (``begin`` to ``end``) has passed ``k`` of its ``n`` layers, each reduced after the one before it."""
    comm, span, share = begin, end - begin, reduce / n
    if not timeline.record:  # the loop below without its spans, in fewer interpreter steps
        for k in range(1, n + 1):
            ready_at = begin + span * k / n
            comm = (comm if comm >= ready_at else ready_at) + share
        return comm
    for k in range(1, n + 1):
        ready_at = begin + span * k / n
        comm = (comm if comm >= ready_at else ready_at) + share
        timeline.add(r, "comm", "dp-reduce", comm - share, comm)
    return comm


def _ends(timeline: Timeline) -> tuple[float, tuple[float, ...]]:
    """What :data:`_ENDS` keeps of an estimate's timeline: its step time and each pipeline's end."""
    return timeline.step_time_s, tuple(timeline.pipeline_end_s)
