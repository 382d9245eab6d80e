"""A deep pipeline's sweep from a short run's order with its period repeated (plait.simulate.periodic) equals the
sweep in dependency order, to the bit, over schedules, depths, virtual stages and uneven stages."""

from __future__ import annotations

import random

import pytest

from plait.predict.estimate import SIMULATED_PASSES
from plait.simulate.periodic import UNROLLED_OPS, periodic_sweep, unrolled_order
from plait.simulate.pipeline import PipelineCosts, Timeline, _sweep, _sweep_recorded, simulate_pipeline

CASES = [  # (schedule, p, v, m): m at least twice the short run's, so the repeat is used
    ("1f1b", 2, 1, 40), ("1f1b", 4, 1, 57), ("1f1b", 8, 1, 200), ("1f1b", 16, 1, 512),
    ("zb-h1", 4, 1, 64), ("zb-h1", 8, 1, 131), ("interleaved", 4, 2, 96), ("interleaved", 8, 3, 256),
    ("interleaved", 16, 6, 256), ("interleaved", 2, 4, 64),
]


def _costs(schedule: str, p: int, v: int, m: int, rng: random.Random) -> PipelineCosts:
    forward = [rng.uniform(0.5, 1.5) for _ in range(p)]
    if rng.random() < 0.5:  # uneven ends only (embedding, output layer): the repeat takes many micro-batches
        forward = [1.0] * p
        forward[0], forward[-1] = 1.1, 1.3
    backward = [2 * f * rng.uniform(0.9, 1.1) for f in forward]
    return PipelineCosts(p=p, m=m, v=v, schedule=schedule, forward_s=forward, backward_s=backward,
                         weight_grad_s=[b / 2 for b in backward], p2p_s=rng.choice([0.0, 0.01, 0.4]),
                         grad_reduce_s=[rng.choice([0.0, 3.0]) for _ in range(p)], param_gather_s=[0.5] * p,
                         buckets=[4] * p, overlap_grad_reduce=rng.random() < 0.5, optimizer_s=[0.2] * p)


@pytest.mark.parametrize(("schedule", "p", "v", "m"), CASES)
def test_periodic_sweep_equals_the_dependency_sweep(schedule: str, p: int, v: int, m: int) -> None:
    rng = random.Random(f"{schedule}{p}{v}{m}")
    c = _costs(schedule, p, v, m, rng)
    zero_bubble = schedule == "zb-h1"
    durations = [(c.forward_s[r], c.backward_s[r] - (c.weight_grad_s[r] if zero_bubble else 0.0),
                  c.weight_grad_s[r]) for r in range(p)]
    took = [d for ranked in durations for d in ranked]
    found = periodic_sweep(schedule, p, m, v, took, (0.0, c.p2p_s))
    assert found is not None, "the repeat is used at this depth"
    free, last = _sweep_recorded(c, durations, (0.0, c.p2p_s), Timeline(record=False))
    assert found[0] == free  # every rank's end, to the bit
    assert found[1] == [begin for begin, _ in last]
    assert _sweep(c, durations, (0.0, c.p2p_s)) == (free, last)  # the order written out where small, else repeated
    recorded = simulate_pipeline(c, record=True)
    assert simulate_pipeline(c, record=False).step_time_s == recorded.step_time_s


def test_short_pipelines_and_gpipe_sweep_in_full() -> None:
    took = [1.0, 2.0, 1.0] * 4
    assert periodic_sweep("1f1b", 4, 12, 1, took, (0.0, 0.1)) is None  # too few micro-batches to repeat
    assert periodic_sweep("gpipe", 4, 512, 1, took, (0.0, 0.1)) is None  # no repeating middle


def test_small_pipelines_replay_the_order_written_out() -> None:
    assert unrolled_order("1f1b", 2, 40, 1) is not None  # 160 operations
    assert unrolled_order("interleaved", 16, 256, 6) is None  # 49,152 operations > UNROLLED_OPS
    assert unrolled_order("1f1b", 4, 12, 1) is None  # too few micro-batches to repeat: swept in full
    assert UNROLLED_OPS >= 3 * SIMULATED_PASSES, "an estimate's simulated pipelines (F, B and W a pass) fit"
