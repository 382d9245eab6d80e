"""A deep pipeline's step extrapolated from its steady state (plait.simulate.steady) equals the replay of every
period (plait.simulate.periodic, itself equal to the full sweep) up to rounding, and replays only a few periods."""

from __future__ import annotations

import random

import pytest

import plait.simulate.steady as steady
from plait.simulate.periodic import _composed, periodic_sweep
from plait.simulate.pipeline import PipelineCosts, simulate_pipeline
from tests.test_simulate_periodic import CASES, _costs

DEEP = [("1f1b", 16, 1, 2048), ("zb-h1", 16, 1, 1024), ("interleaved", 16, 6, 1024), ("interleaved", 8, 2, 1024)]
ROUNDING = 1e-12
"""Relative difference allowed: the extrapolation adds ``k x delta`` where the replay adds ``k`` periods one
operation at a time (steady's module docstring)."""


def _took(c: PipelineCosts) -> list[float]:
    zero_bubble = c.schedule == "zb-h1"
    return [d for r in range(c.p) for d in (c.forward_s[r], c.backward_s[r] - (c.weight_grad_s[r] if zero_bubble
                                                                               else 0.0), c.weight_grad_s[r])]


def _replayed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the operations the steady sweep replays (one entry per call): its periods' and the parts' around them."""
    counted, replay = [], steady._replay

    def counting(segments, *args):  # type: ignore[no-untyped-def]
        counted.append(sum(len(run) + (special is not None) for run, special in segments))
        replay(segments, *args)
    monkeypatch.setattr(steady, "_replay", counting)
    return counted


@pytest.mark.parametrize(("schedule", "p", "v", "m"), CASES + DEEP)
def test_steady_sweep_equals_every_period_replayed(schedule: str, p: int, v: int, m: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    c = _costs(schedule, p, v, m, random.Random(f"steady{schedule}{p}{v}{m}"))
    hops = (0.0, c.p2p_s)
    full = periodic_sweep(schedule, p, m, v, _took(c), hops)
    counted = _replayed(monkeypatch)
    found = steady.steady_sweep(schedule, p, m, v, _took(c), hops)
    assert full is not None and found is not None
    for a, b in zip(full[0] + full[1], found[0] + found[1], strict=True):
        assert b == pytest.approx(a, rel=ROUNDING, abs=ROUNDING * max(full[0]))
    if (p, v, m) in {(p_, v_, m_) for _, p_, v_, m_ in DEEP}:
        assert sum(counted) < 2 * p * m * v / 4, "a deep pipeline replays a fraction of its periods"


def _every_slot(schedule: str, p: int, m: int, v: int, took: list[float],
                hops: tuple[float, float]) -> tuple[list[float], list[float]]:
    """The steady sweep as written first: one slot per activation and gradient of the whole step, each period's
    entries shifted by whole periods, the repeat found by comparing every element of the state, and the state after
    the jump copied to the slots of the period jumped to."""
    before, period, after, n, shift, size = _composed(schedule, p, m, v)  # type: ignore[misc]
    places, deepest, cool = steady._lags(schedule, p, m, v)  # type: ignore[misc]
    arrival, free, last_begin = [0.0] * size, [0.0] * p, [0.0] * p

    def replay(entries, offset: int) -> None:  # type: ignore[no-untyped-def]
        for r, d, wait, fill, hop, last in entries:
            begin = max(free[r], arrival[wait + offset])  # the first of equal operands: the same value
            free[r] = begin + took[d]
            arrival[fill + offset] = free[r] + hops[hop]
            if last:
                last_begin[r] = begin

    def state(j: int) -> list[float]:
        return ends[j] + [arrival[x + j * shift] for x in places]
    replay(before, 0)
    replay(period, 0)
    ends, j, check, last = [free[:]], 1, deepest + 1, n - cool
    while j <= n:
        replay(period, j * shift)
        ends.append(free[:])
        if j == check and j < last:
            check += max(1, steady.CYCLES * p * p // len(period))
            for cycle in range(1, min(steady.CYCLES * p, j - deepest) + 1):
                shifts = [a - b for a, b in zip(state(j), state(j - cycle), strict=True)]
                if max(shifts) - min(shifts) <= steady.SPREAD * max(state(j)):
                    to = j + (last - j) // cycle * cycle
                    ahead = (to - j) // cycle * (min(shifts) + max(shifts)) / 2
                    free[:] = [f + ahead for f in free]
                    for x in places:
                        arrival[x + to * shift] = arrival[x + j * shift] + ahead
                    j = to
                    break
        j += 1
    replay(after, n * shift)
    return free, last_begin


@pytest.mark.parametrize(("schedule", "p", "v", "m"), CASES + DEEP)
def test_steady_sweep_equals_it_over_every_slot(schedule: str, p: int, v: int, m: int) -> None:
    """Kept in a window of slots that slides a period at a time, the periods after the jump in the slots of those
    after its start, and a rank's last operations and outputs without a hop replayed apart: the same times, to the
    bit."""
    c = _costs(schedule, p, v, m, random.Random(f"slots{schedule}{p}{v}{m}"))
    hops = (0.0, c.p2p_s)
    assert steady.steady_sweep(schedule, p, m, v, _took(c), hops) == _every_slot(schedule, p, m, v, _took(c), hops)


def test_first_stage_slower_repeats_after_several_periods(monkeypatch: pytest.MonkeyPatch) -> None:
    """1F1B whose first stage is slower than the rest: the state repeats only after several periods (a max-plus
    system's cyclicity above 1), which the sweep finds, and extrapolates from, as it does one period."""
    p, m = 16, 1024
    forward = [0.236] + [0.2345] * (p - 1)
    backward = [0.682] + [0.6804] * (p - 1)
    c = PipelineCosts(p=p, m=m, v=1, schedule="1f1b", forward_s=forward, backward_s=backward,
                      weight_grad_s=[0.0] * p, p2p_s=0.0029, grad_reduce_s=[0.0] * p, param_gather_s=[0.0] * p,
                      buckets=[1] * p, overlap_grad_reduce=False, optimizer_s=[0.0] * p)
    cycles, repeat = [], steady._repeat

    def recording(*args):  # type: ignore[no-untyped-def]
        found = repeat(*args)
        cycles.append(None if found is None else found[0])
        return found
    monkeypatch.setattr(steady, "_repeat", recording)
    full = simulate_pipeline(c, record=False).step_time_s
    assert simulate_pipeline(c, record=False, extrapolate=True).step_time_s == pytest.approx(full, rel=ROUNDING)
    assert cycles[-1] is not None and 1 < cycles[-1] <= p


def test_uniform_1f1b_takes_m_plus_p_minus_1_slots() -> None:
    """Uniform stages, free hops: 1F1B's step is (m + p - 1)(f + b) (Narayanan et al. 2021, Sec. 2.2.1), which the
    extrapolation over 2,000 periods keeps to rounding."""
    p, m, f, b = 8, 2048, 0.75, 1.5
    c = PipelineCosts(p=p, m=m, v=1, schedule="1f1b", forward_s=[f] * p, backward_s=[b] * p, weight_grad_s=[0.0] * p,
                      p2p_s=0.0, grad_reduce_s=[0.0] * p, param_gather_s=[0.0] * p, buckets=[1] * p,
                      overlap_grad_reduce=False, optimizer_s=[0.0] * p)
    assert simulate_pipeline(c, record=False, extrapolate=True).step_time_s == pytest.approx((m + p - 1) * (f + b),
                                                                                            rel=ROUNDING)


def test_sweeps_alike_are_swept_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two pipelines that differ only past the sweep (their optimizer step) share one sweep, each with its own
    step."""
    c = _costs("1f1b", 8, 1, 256, random.Random(3))
    other = PipelineCosts(**{**vars(c), "optimizer_s": [x + 1.0 for x in c.optimizer_s]})
    counted, swept = _replayed(monkeypatch), {}
    first = simulate_pipeline(c, record=False, extrapolate=True, swept=swept)
    calls = len(counted)
    second = simulate_pipeline(other, record=False, extrapolate=True, swept=swept)
    assert len(counted) == calls and len(swept) == 1
    assert second.step_time_s == pytest.approx(first.step_time_s + 1.0, rel=1e-12)


def test_short_pipelines_and_gpipe_are_left_to_the_full_sweep() -> None:
    took = [1.0, 2.0, 1.0] * 4
    assert steady.steady_sweep("1f1b", 4, 12, 1, took, (0.0, 0.1)) is None  # too few micro-batches to repeat
    assert steady.steady_sweep("gpipe", 4, 512, 1, took, (0.0, 0.1)) is None  # no repeating middle
