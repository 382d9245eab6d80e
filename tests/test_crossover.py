"""Crossover sharing: the paired-step cost (:mod:`plait.cost.crossover`), the ``crossover`` scheduling policy
(:mod:`plait.schedule.crossover`) and the two-job emulation on gloo ranks (:mod:`plait.run.crossover_pair`)."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plait.cost.crossover import StepSplit, pair_cost
from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.plan.plan import Plan
from plait.schedule.crossover import Crossover
from plait.schedule.policies import make_policy
from plait.schedule.pool import Pool
from plait.schedule.simulate import simulate
from plait.schedule.speed import Speed, SpeedModel
from plait.schedule.trace import TraceJob

GIB = 2.0**30


def split(c: float, s: float, peak_gib: float = 10.0, resident_gib: float = 5.0,
          capacity_gib: float = 80.0) -> StepSplit:
    return StepSplit(compute_s=c, sync_s=s, peak_bytes=peak_gib * GIB, resident_bytes=resident_gib * GIB,
                     capacity_bytes=capacity_gib * GIB)


# (a) hand-computed cases: T = max(cA + cB, cA + sA, cB + sB, sA + sB)
@pytest.mark.parametrize(("a", "b", "period", "slow_a", "slow_b", "gain", "bound"), [
    ((1.0, 0.5), (1.0, 0.5), 2.0, 4 / 3, 4 / 3, 0.5, "gpu"),  # the computes fill the period
    ((1.0, 3.0), (1.0, 1.0), 4.0, 1.0, 2.0, 0.5, "a"),  # A's own step (the link ties at 4: first bound named wins)
    ((1.0, 3.0), (0.5, 3.0), 6.0, 1.5, 6 / 3.5, 0.25, "link"),  # the two synchronizations take turns
    ((2.0, 0.0), (3.0, 0.0), 5.0, 2.5, 5 / 3, 0.0, "gpu"),  # nothing to hide: plain time-slicing
])
def test_paired_period_slowdowns_and_gain_by_hand(a: tuple[float, float], b: tuple[float, float], period: float,
                                                  slow_a: float, slow_b: float, gain: float, bound: str) -> None:
    cost = pair_cost(split(*a), split(*b))
    assert cost.period_s == pytest.approx(period)
    assert (cost.slowdown_a, cost.slowdown_b) == (pytest.approx(slow_a), pytest.approx(slow_b))
    assert cost.gain == pytest.approx(gain)
    assert cost.bound == bound


def test_both_jobs_must_fit_each_gpu_together() -> None:
    """While A computes, B keeps its resident bytes (no activations) on the GPU, and the other way round."""
    assert pair_cost(split(1, 1, peak_gib=50, resident_gib=20), split(1, 1, peak_gib=50, resident_gib=30)).fits
    assert not pair_cost(split(1, 1, peak_gib=50, resident_gib=20), split(1, 1, peak_gib=50, resident_gib=31)).fits
    assert not pair_cost(split(1, 1, peak_gib=61, resident_gib=20), split(1, 1, peak_gib=50, resident_gib=30)).fits


def alternate(a: StepSplit, b: StepSplit, steps: int) -> float:
    """The alternation played out: the GPU runs A's compute, then B's, and so on; each job synchronizes once its
    compute ends and the link is free (A's before B's); a job computes again once its synchronization ended. The
    mean period of the second half of ``steps``."""
    gpu = link = 0.0
    sync_end = {"a": 0.0, "b": 0.0}
    starts = []
    for _ in range(steps):
        for name, job in (("a", a), ("b", b)):
            start = max(gpu, sync_end[name])
            if name == "a":
                starts.append(start)
            gpu = start + job.compute_s
            link = max(link, gpu) + job.sync_s
            sync_end[name] = link
    half = steps // 2
    return (starts[-1] - starts[half]) / (steps - 1 - half)


durations = st.floats(0.01, 10.0)


@settings(max_examples=60, deadline=None)
@given(ca=durations, sa=st.floats(0.0, 10.0), cb=durations, sb=st.floats(0.0, 10.0))
def test_the_period_is_what_the_alternation_settles_to(ca: float, sa: float, cb: float, sb: float) -> None:
    """The derived period against an event-by-event run of the schedule it describes (computed another way);
    slowdowns at least 1 and the gain in [0, 1]."""
    a, b = split(ca, sa), split(cb, sb)
    cost = pair_cost(a, b)
    assert alternate(a, b, 200) == pytest.approx(cost.period_s, rel=1e-6)
    assert cost.slowdown_a >= 1 - 1e-12 and cost.slowdown_b >= 1 - 1e-12
    assert -1e-12 <= cost.gain <= 1 + 1e-12


# (b) the policy on toy speeds whose phases are given
TOY = {"gpt3-125m": (1.0, 0.5, 30.0, 10.0), "gpt3-1.3b": (1.0, 0.5, 70.0, 30.0), "gpt3-350m": (1.0, 0.0, 30.0, 10.0)}
"""model -> (compute s, sync s, peak GiB, resident GiB) per step at any size: toy figures, not predictions."""


class PhasedSpeed(SpeedModel):
    """1,000 tokens/s per GPU and the phases of :data:`TOY`, whatever the placement."""

    def _search(self, model: str, gpus: int, spans: tuple[int, ...]) -> Speed | None:
        c, s, peak, resident = TOY[model]
        return Speed(tokens_per_s=1000.0 * gpus, state_bytes=1e9, gpus=gpus, plan=Plan(dp_replicate=gpus),
                     storage_bytes_per_s_per_gpu=self._storage, relaunch_s=self._relaunch_s,
                     split=split(c, s, peak, resident))


def run(jobs: tuple[TraceJob, ...], policy: str, gpus: int = 8):
    cluster = get_cluster("dgx-h100-ib")
    return simulate(jobs, Pool(cluster, gpus), PhasedSpeed(cluster, get_engine()), make_policy(policy))


def two_jobs(model: str) -> tuple[TraceJob, ...]:
    """A: 1,000 s alone on all 8 GPUs from 0; B: 600 s alone on the same 8, arriving at 100 s."""
    return (TraceJob(job_id="a", arrival_s=0.0, model=model, gpus=8, tokens=8000.0 * 1000),
            TraceJob(job_id="b", arrival_s=100.0, model=model, gpus=8, tokens=8000.0 * 600))


def test_a_waiting_job_shares_a_running_jobs_gpus_at_the_predicted_slowdown() -> None:
    """Both jobs compute 1 s and synchronize 0.5 s per step: paired, a step of each every 2 s, each 4/3 slower.
    From 100 s both run at 6,000 tokens/s: B's 4.8M tokens take 800 s (done at 900 s); A then has 8M - 0.8M -
    4.8M = 2.4M left at 8,000 tokens/s alone, 300 s (done at 1,200 s). FIFO: A at 1,000 s, B at 1,600 s."""
    paired, fifo = run(two_jobs("gpt3-125m"), "crossover"), run(two_jobs("gpt3-125m"), "fifo")
    assert [j.finish_s for j in paired.jobs] == [pytest.approx(1200.0), pytest.approx(900.0)]
    assert [j.finish_s for j in fifo.jobs] == [pytest.approx(1000.0), pytest.approx(1600.0)]
    (pair,) = paired.pairs or ()
    assert (pair.host_id, pair.guest_id, pair.at_s, pair.period_s) == ("a", "b", 100.0, pytest.approx(2.0))
    assert (pair.host_slowdown, pair.gain) == (pytest.approx(4 / 3), pytest.approx(0.5))
    # the GPUs are held once: A until 1,200 s; B, sharing them, holds none of its own
    assert {(s.job_id, s.start_s, s.end_s) for s in paired.segments} == {("a", 0.0, 1200.0)}
    assert paired.summary()["pairs"] == 1 and "pairs" not in fifo.summary()


@pytest.mark.parametrize("model", ["gpt3-1.3b", "gpt3-350m"])
def test_no_pair_where_memory_does_not_fit_or_nothing_is_gained(model: str) -> None:
    """70 GiB at the peak + 30 GiB resident > 80 GiB; no synchronization: gain 0 < the 5% asked: both FIFO."""
    result = run(two_jobs(model), "crossover")
    assert result.pairs == ()
    assert [j.finish_s for j in result.jobs] == [pytest.approx(1000.0), pytest.approx(1600.0)]


def test_the_holder_leaving_first_passes_the_gpus_to_its_partner() -> None:
    """A (300 s alone) hosts B from 100 s: its last 200 s of work take 200 x 4/3 s, done at 366.7 s. C arrives at
    200 s and finds no unpaired job to share; when A completes, its GPUs pass to B (B's segment starts there, none
    returns to the pool) and C shares them with B at once."""
    jobs = (TraceJob(job_id="a", arrival_s=0.0, model="gpt3-125m", gpus=8, tokens=8000.0 * 300),
            TraceJob(job_id="b", arrival_s=100.0, model="gpt3-125m", gpus=8, tokens=8000.0 * 3000),
            TraceJob(job_id="c", arrival_s=200.0, model="gpt3-125m", gpus=8, tokens=8000.0 * 10))
    result = run(jobs, "crossover")
    a, b, c = result.jobs
    assert a.finish_s == pytest.approx(100.0 + 200.0 * 4 / 3)
    held = sorted((s.job_id, round(s.start_s, 6)) for s in result.segments)
    assert held[:2] == [("a", 0.0), ("b", round(a.finish_s, 6))]
    assert c.first_start_s == pytest.approx(a.finish_s)  # C shares B's GPUs as soon as B is alone
    assert [(p.host_id, p.guest_id) for p in result.pairs or ()] == [("a", "b"), ("b", "c")]
    assert c.finish_s is not None and b.finish_s is not None and c.finish_s < b.finish_s


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), num_jobs=st.integers(2, 30), gap_s=st.sampled_from([30.0, 300.0]))
def test_every_job_finishes_once_no_gpu_is_held_twice_and_none_beats_its_solo_run(seed: int, num_jobs: int,
                                                                                  gap_s: float) -> None:
    rng, jobs = random.Random(seed), []
    for i in range(num_jobs):
        gpus = (4, 8, 8, 16)[int(rng.random() * 4)]
        model = sorted(TOY)[int(rng.random() * len(TOY))]
        jobs.append(TraceJob(job_id=f"j{i:02d}", arrival_s=round(i * gap_s * rng.random() * 2, 3), model=model,
                             gpus=gpus, tokens=1000.0 * gpus * 60 * 10 ** (rng.random() * 2)))
    trace = tuple(sorted(jobs, key=lambda j: (j.arrival_s, j.job_id)))
    result = run(trace, "crossover", gpus=16)
    assert all(j.status == "done" for j in result.jobs)
    for job, res in zip(trace, result.jobs, strict=True):
        assert res.first_start_s is not None and res.first_start_s >= job.arrival_s
        assert res.jct_s >= job.tokens / (1000.0 * job.gpus) * (1 - 1e-9)  # alone at 1,000 tokens/s per GPU
    edges = sorted([(s.start_s, s.gpus) for s in result.segments] + [(s.end_s, -s.gpus) for s in result.segments])
    held = 0
    for _, gpus in edges:
        held += gpus
        assert held <= 16
    for pair in result.pairs or ():
        assert pair.gain >= Crossover().min_gain and pair.host_slowdown >= 1 and pair.guest_slowdown >= 1
    assert run(trace, "crossover", gpus=16) == result


def test_speeds_without_phases_pair_nothing() -> None:
    """The planner's speeds carry their phases; a speed model that gives none leaves the policy FIFO."""
    assert Crossover().min_gain > 0
    cluster = get_cluster("dgx-h100-ib")

    class Bare(PhasedSpeed):
        def _search(self, model: str, gpus: int, spans: tuple[int, ...]) -> Speed | None:
            found = super()._search(model, gpus, spans)
            assert found is not None
            return replace(found, split=None)

    result = simulate(two_jobs("gpt3-125m"), Pool(cluster, 8), Bare(cluster, get_engine()), make_policy("crossover"))
    assert result.pairs == () and [j.finish_s for j in result.jobs] == [pytest.approx(1000.0), pytest.approx(1600.0)]


# (c) the emulation on 2 gloo ranks
@pytest.mark.slow
def test_two_jobs_alternating_on_two_ranks_train_exactly_as_alone(tmp_path: Path) -> None:
    """Each job's losses paired equal its losses alone within 1e-5, on both emulated links (loopback, and 0.6 GB/s
    of wire time); the measured and predicted periods are reported (their ratio: ``benchmarks/crossover_pair.py``)."""
    from tests.ranks import run_ranks

    out = tmp_path / "pair.json"
    done = run_ranks(2, ["-m", "plait.run.crossover_pair", "--out", str(out), "--steps", "4", "--warmup", "1",
                         "--rounds", "1", "--link-bytes-per-s", "6e8"], timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    (rd,) = result["rounds"]
    for name in ("a", "b"):
        solo, paired = rd["solo"][name]["losses"], rd["paired"]["losses"][name]
        assert len(solo) == len(paired) == 4
        assert paired == pytest.approx(solo, abs=1e-5)
        assert solo[-1] < solo[0]  # it trains
    assert rd["paired"]["period_s"] > 0 and rd["predicted"]["period_s"] > 0
