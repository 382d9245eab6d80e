"""The pipeline sweep (plait.simulate.pipeline) against an event simulation of the same rules on the event kernel.

The reference below runs every rank's operation order on :class:`plait.events.kernel.Kernel`: a rank dispatches
its next operation when it finishes one or when an input reaches it, if that operation's input is there. The
sweep must give the same start and end of every operation, pipeline end and step time, to the last bit, on every
schedule over random stage times, including uneven ranks and zero-bubble W passes."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from plait.events.kernel import Kernel
from plait.simulate.pipeline import PipelineCosts, _durations, simulate_pipeline
from plait.simulate.schedules import order
from plait.simulate.straight import STRAIGHT_AFTER, straight_sweep, written_out
from tests.pipeline_costs import LAYOUTS as OTHER_LAYOUTS
from tests.pipeline_costs import random_costs


def reference(c: PipelineCosts) -> tuple[dict[tuple[int, str, int, int], tuple[float, float]], list[float]]:
    """(start, end) per (rank, kind, micro-batch, chunk) and each rank's last end, by events."""
    kernel, spans = Kernel(), {}
    ops = [deque(order(c.schedule, c.p, c.m, r, c.v)) for r in range(c.p)]
    busy, end, arrived = [False] * c.p, [0.0] * c.p, set()
    stages, zero_bubble = c.p * c.v, c.schedule == "zb-h1"

    def ready(r: int) -> bool:
        kind, micro, chunk = ops[r][0]
        stage = r + chunk * c.p
        if kind == "W":
            return True
        if kind == "F":
            return stage == 0 or ("F", micro, stage) in arrived
        return ("B", micro, stage) in arrived and ("done-F", micro, stage) in arrived

    def dispatch(r: int) -> None:
        if busy[r] or not ops[r] or not ready(r):
            return
        kind, micro, chunk = ops[r].popleft()
        duration = {"F": c.forward_s[r], "W": c.weight_grad_s[r],
                    "B": c.backward_s[r] - (c.weight_grad_s[r] if zero_bubble else 0.0)}[kind]
        busy[r], begin = True, kernel.now
        kernel.at(begin + duration, lambda: finish(r, kind, micro, chunk, begin))

    def finish(r: int, kind: str, micro: int, chunk: int, begin: float) -> None:
        busy[r], now, stage = False, kernel.now, r + chunk * c.p
        spans[(r, kind, micro, chunk)] = (begin, now)
        if kind == "F":
            arrived.add(("done-F", micro, stage))
            if stage == stages - 1:
                arrived.add(("B", micro, stage))
            else:
                target = (stage + 1) % c.p
                kernel.at(now + c.p2p_s, lambda: (arrived.add(("F", micro, stage + 1)), dispatch(target)))
        elif kind == "B" and stage > 0:
            target = (stage - 1) % c.p
            kernel.at(now + c.p2p_s, lambda: (arrived.add(("B", micro, stage - 1)), dispatch(target)))
        end[r] = now
        dispatch(r)

    for r in range(c.p):
        kernel.at(0.0, lambda r=r: dispatch(r))
    kernel.run()
    assert not any(ops), "the reference ran every operation"
    return spans, end


LAYOUTS = [("1f1b", p, m, 1) for p, m in ((1, 4), (2, 2), (2, 64), (4, 3), (4, 8), (8, 8), (8, 32), (16, 16))]
LAYOUTS += OTHER_LAYOUTS


@pytest.mark.parametrize(("schedule", "p", "m", "v"), LAYOUTS)
def test_sweep_equals_the_event_simulation(schedule: str, p: int, m: int, v: int) -> None:
    rng = np.random.default_rng(p * 1000 + m * 10 + v)
    for _ in range(3):
        costs = random_costs(rng, schedule, p, m, v)
        spans, ends = reference(costs)
        timeline = simulate_pipeline(costs)
        swept = {(s.rank, s.kind, s.micro_batch, s.chunk): (s.start, s.end) for s in timeline.spans
                 if s.kind in ("F", "B", "W")}
        assert swept == spans
        assert timeline.pipeline_end_s == ends
        bare = simulate_pipeline(costs, record=False)  # the estimate's sweep, without spans: the same bits
        assert (bare.step_time_s, bare.pipeline_end_s) == (timeline.step_time_s, timeline.pipeline_end_s)
        straight = straight_sweep(schedule, p, m, v)  # the order written out as Python: the same bits again
        if straight is not None:
            last = {s.rank: (s.start, s.end) for s in timeline.spans if s.kind in ("F", "B", "W")}
            took = [d for ranked in _durations(costs) for d in ranked]
            assert straight(took, costs.p2p_s) == (ends, [last[r] for r in range(p)])


def test_a_shape_swept_often_is_written_out_with_the_same_times() -> None:
    costs = random_costs(np.random.default_rng(7), "1f1b", 2, 6, 1)
    first = simulate_pipeline(costs, record=False)
    for _ in range(STRAIGHT_AFTER + 2):  # past the loop's sweeps, onto the written-out order (swept: none kept)
        again = simulate_pipeline(costs, record=False, swept={})
        assert (again.step_time_s, again.pipeline_end_s) == (first.step_time_s, first.pipeline_end_s)
    assert written_out("1f1b", 2, 6, 1) is straight_sweep("1f1b", 2, 6, 1) is not None
