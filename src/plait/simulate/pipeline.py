"""Simulate one step of one pipeline: every rank's compute stream and communication stream.

Each rank runs its operation order (:mod:`plait.simulate.schedules`) strictly in sequence,
each operation once its input has arrived — as ``torch.distributed.pipelining``'s runtime
executes its per-rank action list, waiting on each receive right before the compute that
needs it. Per operation the durations come from the estimator (:mod:`plait.simulate.costs`);
activations and gradients travel between neighbouring stages with the point-to-point time
on the edge; after a rank's last backward, its data-parallel gradient buckets (one per
layer, ready as the last backward passes that layer) are reduced on its communication
stream, then the optimizer steps. The step ends when the slowest rank ends.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from plait.simulate.kernel import Kernel
from plait.simulate.schedules import Op, order


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


class _Rank:
    def __init__(self, rank: int, ops: list[Op]) -> None:
        self.rank = rank
        self.ops = deque(ops)
        self.busy = False
        self.end = 0.0
        self.last_backward: tuple[float, float] = (0.0, 0.0)


def simulate_pipeline(c: PipelineCosts, record: bool = True) -> Timeline:
    """Run the schedule on the event kernel (``record``: keep every span, not only the end times)."""
    kernel, timeline = Kernel(), Timeline(record=record)
    ranks = [_Rank(r, order(c.schedule, c.p, c.m, r, c.v)) for r in range(c.p)]
    arrived: set[tuple[str, int, int]] = set()  # (kind, micro, global stage) inputs present at that stage
    stages = c.p * c.v
    zero_bubble = c.schedule == "zb-h1"

    def stage_of(rank: int, chunk: int) -> int:
        return rank + chunk * c.p

    def ready(op: Op, rank: int) -> bool:
        kind, micro, chunk = op
        stage = stage_of(rank, chunk)
        if kind == "W":  # its B ran earlier on this rank
            return True
        if kind == "F":
            return stage == 0 or ("F", micro, stage) in arrived
        return ("B", micro, stage) in arrived and ("done-F", micro, stage) in arrived

    def start(state: _Rank, kind: str, micro: int, chunk: int, duration: float) -> None:
        state.busy = True
        begin = kernel.now
        timeline.add(state.rank, "compute", kind, begin, begin + duration, micro, chunk)
        kernel.at(begin + duration, lambda: finish(state, kind, micro, chunk, begin))

    def dispatch(state: _Rank) -> None:
        if state.busy or not state.ops or not ready(state.ops[0], state.rank):
            return
        kind, micro, chunk = state.ops.popleft()
        r = state.rank
        if kind == "F":
            start(state, "F", micro, chunk, c.forward_s[r])
        elif kind == "W":
            start(state, "W", micro, chunk, c.weight_grad_s[r])
        else:  # with a W of its own, B is the input-gradient part only
            start(state, "B", micro, chunk, c.backward_s[r] - (c.weight_grad_s[r] if zero_bubble else 0.0))

    def finish(state: _Rank, kind: str, micro: int, chunk: int, begin: float) -> None:
        state.busy = False
        stage = stage_of(state.rank, chunk)
        now = kernel.now
        if kind == "F":
            arrived.add(("done-F", micro, stage))
            if stage == stages - 1:
                arrived.add(("B", micro, stage))
            else:
                target = ranks[(stage + 1) % c.p]
                kernel.at(now + c.p2p_s, lambda: (arrived.add(("F", micro, stage + 1)), dispatch(target)))
        elif kind == "B" and stage > 0:
            target = ranks[(stage - 1) % c.p]
            kernel.at(now + c.p2p_s, lambda: (arrived.add(("B", micro, stage - 1)), dispatch(target)))
        if kind in ("B", "W"):
            state.last_backward = (begin, now)
        state.end = now
        dispatch(state)

    for state in ranks:
        kernel.at(0.0, lambda s=state: dispatch(s))
    kernel.run()
    for state in ranks:
        timeline.pipeline_end_s.append(state.end)
        end = _data_parallel(timeline, c, state)
        timeline.step_time_s = max(timeline.step_time_s, end)
    return timeline


def _data_parallel(timeline: Timeline, c: PipelineCosts, state: _Rank) -> float:
    """Gradient buckets on the communication stream, then the optimizer; returns the rank's end."""
    r = state.rank
    begin, end = state.last_backward
    reduce, gather = c.grad_reduce_s[r], c.param_gather_s[r]
    comm = end
    if reduce > 0:
        n = max(c.buckets[r], 1)
        if c.overlap_grad_reduce:
            comm = begin
            for k in range(n):  # bucket k is ready once the last backward has passed k+1 of n layers
                ready_at = begin + (end - begin) * (k + 1) / n
                comm = max(comm, ready_at) + reduce / n
                timeline.add(r, "comm", "dp-reduce", comm - reduce / n, comm)
        else:
            timeline.add(r, "comm", "dp-reduce", end, end + reduce)
            comm = end + reduce
    finish = max(comm, state.end)
    if gather > 0:
        exposed = gather if not c.overlap_grad_reduce else max(0.0, gather - c.forward_s[r])
        timeline.add(r, "comm", "param-gather", finish, finish + exposed)
        finish += exposed
    timeline.add(r, "compute", "optimizer", finish, finish + c.optimizer_s[r])
    return finish + c.optimizer_s[r]
