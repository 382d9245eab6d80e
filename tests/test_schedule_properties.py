"""plait schedule's invariants: a regression record of every policy on a fixed busy trace (so that speed work cannot
change a result), and property tests over random small traces (every job finishes once, no GPU is held twice, no job
beats its own fastest run, the same input gives the same result).

Both use :class:`ToySpeed`, a speed model with a closed-form throughput in place of plait's planner, so that what is
checked is the scheduler alone: a change to the cost model (owned elsewhere) moves no number here.
"""

from __future__ import annotations

import hashlib
import random
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.plan.plan import Plan
from plait.schedule import policies
from plait.schedule.policies import POLICY_NAMES, make_policy
from plait.schedule.pool import Pool
from plait.schedule.result import ScheduleResult
from plait.schedule.simulate import simulate
from plait.schedule.speed import Speed, SpeedModel
from plait.schedule.trace import TraceJob

CLUSTER = "dgx-h100-ib"
TOY_MODELS = {"gpt3-125m": (1, 4.0e5, 2.0e9), "gpt3-1.3b": (1, 6.0e4, 2.0e10), "llama3-8b": (2, 1.2e4, 1.3e11)}
"""model -> (fewest GPUs it fits on, tokens/s on one GPU, checkpoint bytes): toy figures, not predictions."""


class ToySpeed(SpeedModel):
    """``tokens/s = per_gpu x gpus^0.9``, 15% less where a tier's span is shrunk (spread): the planner's shape
    (sub-linear scaling, a spread job slower, sizes where nothing fits) in a formula the test can trust."""

    def _search(self, model: str, gpus: int, spans: tuple[int, ...]) -> Speed | None:
        fewest, per_gpu, state_bytes = TOY_MODELS[model]
        if gpus < fewest:
            return None
        spread = spans != tuple(t.span_gpus for t in self.cluster.tiers)
        return Speed(tokens_per_s=per_gpu * gpus**0.9 * (0.85 if spread else 1.0), state_bytes=state_bytes,
                     gpus=gpus, plan=Plan(dp_replicate=gpus, global_batch=gpus),
                     storage_bytes_per_s_per_gpu=self._storage, relaunch_s=self._relaunch_s)


@cache
def toy_speed() -> ToySpeed:
    return ToySpeed(get_cluster(CLUSTER), get_engine())  # the engine is unused: the toy formula stands for search


def toy_trace(seed: int, num_jobs: int, mean_gap_s: float) -> tuple[TraceJob, ...]:
    """``num_jobs`` jobs from ``random.Random(seed).random()`` alone (its stream is fixed across Python versions):
    sizes 1-16 GPUs, durations log-uniform over 1 minute to 28 hours (heavy-tailed), arrivals ``mean_gap_s`` apart
    on average."""
    rng, jobs, now = random.Random(seed), [], 0.0
    for i in range(num_jobs):
        gpus = (1, 1, 1, 2, 4, 8, 16)[int(rng.random() * 7)]
        model = ("gpt3-125m", "gpt3-1.3b", "llama3-8b")[int(rng.random() * 3)]
        gpus = max(gpus, TOY_MODELS[model][0])
        seconds = 60.0 * 10 ** (rng.random() * 3.2)
        at = toy_speed().at(model, gpus)
        assert at is not None
        jobs.append(TraceJob(job_id=f"t{i:03d}", arrival_s=round(now, 3), model=model, gpus=gpus,
                             tokens=float(f"{seconds * at.tokens_per_s:.6g}")))
        now += 2.0 * mean_gap_s * rng.random()
    return tuple(jobs)


def run_toy(jobs: tuple[TraceJob, ...], name: str, gpus: int) -> ScheduleResult:
    return simulate(jobs, Pool(get_cluster(CLUSTER), gpus), toy_speed(), make_policy(name))


def fingerprint(result: ScheduleResult) -> str:
    """Every job's finish (to the millisecond), sizes and preemptions, and every allocation, hashed."""
    jobs = [(j.job_id, j.status, round(j.finish_s or -1.0, 3), j.sizes, j.preemptions) for j in result.jobs]
    segments = sorted((s.job_id, s.node, s.gpus, round(s.start_s, 3), round(s.end_s, 3)) for s in result.segments)
    return hashlib.sha256(repr((jobs, segments)).encode()).hexdigest()[:16]


RECORDED = {  # (GPUs, mean gap s) -> policy -> (mean JCT s, makespan s, preemptions, fingerprint)
    (16, 1500.0): {"fifo": (214605.19898220783, 434172.3527132147, 0, "1f8bd9970bfff1eb"),
                   "srtf": (19089.691958839416, 306706.06767731917, 41, "025b3080a9d82b0b"),
                   "las": (40882.91876447109, 279439.8723381963, 151, "db080da34f92cf2c"),
                   "consolidate": (214605.19898220783, 434172.3527132147, 0, "1f8bd9970bfff1eb"),
                   "elastic": (28957.619921558515, 226030.04892947339, 81, "8ffec7c7121ad976")},
    (32, 400.0): {"fifo": (75161.83383523513, 189917.35802815275, 0, "305933904183d379"),
                  "srtf": (15522.604833398822, 168471.82471908978, 61, "f0e81d0f1fd51d02"),
                  "las": (21265.81406003936, 176617.2816875319, 85, "d52cfed8859199f2"),
                  "consolidate": (75132.20869807222, 189917.35802815275, 0, "22df9e007f086985"),
                  "elastic": (15332.243239522004, 123414.1390202343, 122, "8420c2361670abd6")},
}


@pytest.mark.parametrize("queue_head", [1, policies.QUEUE_HEAD])
@pytest.mark.parametrize("name", list(RECORDED[16, 1500.0]))  # crossover is checked by tests/test_crossover.py
@pytest.mark.parametrize(("gpus", "gap_s"), list(RECORDED))
def test_every_policy_gives_the_results_recorded_before_the_speed_work(name: str, gpus: int, gap_s: float,
                                                                      queue_head: int,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A regression record, not a proof of correctness: the expected values are what the simulator printed at
    commit b13f059, before the policies' passes were made incremental for speed, on a 60-job trace whose offered
    load is about 2 (the queue builds, so every policy preempts, waits and resizes). The speed work must not move any
    job's finish, size or allocation; the orderings themselves are proven by hand in tests/test_schedule.py. A
    preemptive pass merging one waiting job at a time (``queue_head=1``) exercises its head doubling."""
    monkeypatch.setattr(policies, "QUEUE_HEAD", queue_head)
    result = run_toy(toy_trace(5, 60, gap_s), name, gpus)
    mean_jct_s, makespan_s, preemptions, digest = RECORDED[(gpus, gap_s)][name]
    summary = result.summary()
    assert summary["mean_jct_s"] == pytest.approx(mean_jct_s, rel=1e-12)
    assert summary["makespan_s"] == pytest.approx(makespan_s, rel=1e-12)
    assert summary["preemptions"] == preemptions
    assert fingerprint(result) == digest


def fastest_s(job: TraceJob, name: str, capacity_gpus: int) -> float:
    """The job alone on an empty cluster at the fastest size ``name`` may give it (elastic: up to 4x its request)."""
    sizes = [job.gpus] if name != "elastic" else [job.gpus << k for k in range(3) if job.gpus << k <= capacity_gpus]
    speeds = [s.tokens_per_s for s in (toy_speed().at(job.model, g) for g in sizes) if s is not None]
    return job.tokens / max(speeds)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), num_jobs=st.integers(1, 25), gap_s=st.sampled_from([60.0, 600.0, 6_000.0]),
       nodes=st.sampled_from([2, 3, 4]), name=st.sampled_from(POLICY_NAMES))
def test_every_job_finishes_once_within_capacity_and_no_faster_than_alone(seed: int, num_jobs: int, gap_s: float,
                                                                          nodes: int, name: str) -> None:
    jobs, gpus = toy_trace(seed, num_jobs, gap_s), 8 * nodes
    result = run_toy(jobs, name, gpus)
    assert [j.job_id for j in result.jobs] == [j.job_id for j in jobs]
    assert all(j.status == "done" and j.finish_s is not None for j in result.jobs)
    for job, res in zip(jobs, result.jobs, strict=True):
        assert res.first_start_s is not None and res.first_start_s >= job.arrival_s
        assert res.jct_s >= fastest_s(job, name, gpus) * (1 - 1e-9)
    edges = sorted([(s.start_s, s.gpus, s.node) for s in result.segments]
                   + [(s.end_s, -s.gpus, s.node) for s in result.segments])  # at one instant, releases first
    held, per_node = 0, [0] * nodes
    for _, n, node in edges:
        held += n
        per_node[node] += n
        assert held <= gpus and per_node[node] <= 8
    assert run_toy(jobs, name, gpus) == result


def _greedy(smallest: list[int], steps: list[dict[int, tuple[float, int]]], capacity: int) -> dict[int, int]:
    """The elastic allocation as its docstring states it, written plainly with a heap (the oracle for the array
    version): smallest sizes first-fit in arrival order, then the step with the best gain per added GPU while it
    fits; a step that does not fit is dropped with its job's later steps."""
    import heapq

    free, alloc = capacity, {}
    for i, size in enumerate(smallest):
        if free == 0:
            break
        if size <= free:
            alloc[i] = size
            free -= size
    heap = [(steps[i][size][0], i, steps[i][size][1]) for i, size in alloc.items() if size in steps[i]]
    heapq.heapify(heap)
    while heap and free:
        _, i, nxt = heapq.heappop(heap)
        if nxt - alloc[i] <= free:
            free -= nxt - alloc[i]
            alloc[i] = nxt
            if nxt in steps[i]:
                gain, after = steps[i][nxt]
                heapq.heappush(heap, (gain, i, after))
    return alloc


@settings(max_examples=200, deadline=None)
@given(data=st.data(), capacity=st.integers(1, 64), num_jobs=st.integers(0, 40))
def test_elastic_array_allocation_makes_the_heap_greedys_choices(data: st.DataObject, capacity: int,
                                                                  num_jobs: int) -> None:
    """Random chains of doubling sizes with random gains (ties and gains that rise along a chain included): the
    array allocation (plait.schedule.elastic_alloc) gives every job the size the heap greedy gives it."""
    import numpy as np

    from plait.schedule.elastic_alloc import ChainTable, allocate

    smallest, steps = [], []
    for _ in range(num_jobs):
        size = data.draw(st.sampled_from([1, 2, 4, 8]))
        chain: dict[int, tuple[float, int]] = {}
        for _ in range(data.draw(st.integers(0, 4))):
            chain[size] = (-data.draw(st.sampled_from([0.1, 0.25, 0.5, 0.5, 1.0])), 2 * size)
            size *= 2
        smallest.append(size >> len(chain))
        steps.append(chain)
    table = ChainTable()
    table.grow_to(num_jobs // 2)  # room for half the jobs first: the steps held are renumbered as indices widen
    for i in range(num_jobs):
        table.grow_to(num_jobs if i == num_jobs // 2 else 0)
        table.set(i, smallest[i], steps[i])
    jobs, sizes = allocate(table, np.arange(num_jobs, dtype=np.int64), capacity)
    assert dict(zip(jobs.tolist(), sizes.tolist(), strict=True)) == _greedy(smallest, steps, capacity)
    # Jobs complete: the table drops their steps, and the jobs left get what the heap greedy gives them alone.
    done = set(data.draw(st.sets(st.integers(0, max(num_jobs - 1, 0)))) if num_jobs else set())
    for i in sorted(done):
        table.remove(i)
    left = [i for i in range(num_jobs) if i not in done]
    jobs, sizes = allocate(table, np.array(left, dtype=np.int64), capacity)
    expected = _greedy([smallest[i] for i in left], [steps[i] for i in left], capacity)
    assert dict(zip(jobs.tolist(), sizes.tolist(), strict=True)) == {left[i]: n for i, n in expected.items()}
    assert table.num_steps == sum(len(steps[i]) for i in left)


@settings(max_examples=300, deadline=None)
@given(gpus=st.lists(st.sampled_from([1, 1, 2, 3, 4, 8, 16]), max_size=40), budget=st.integers(0, 64))
def test_greedy_fit_takes_each_job_that_fits_the_gpus_left_in_turn(gpus: list[int], budget: int) -> None:
    """The array first fit against the walk it states, one job at a time: taken positions, where the walk ended
    (after the job that used the last GPU, else at the end) and the GPUs left."""
    import numpy as np

    from plait.schedule.fit import greedy_fit

    taken, walked, left = [], len(gpus), budget
    for at, n in enumerate(gpus):
        if left == 0:
            walked = at
            break
        if n <= left:
            taken.append(at)
            left -= n
    else:
        walked = len(gpus) if left else (taken[-1] + 1 if taken else 0)
    got, got_walked, got_left = greedy_fit(np.array(gpus, dtype=np.int64), budget)
    assert (got.tolist(), got_walked, got_left) == (taken, walked, left)


@settings(max_examples=150, deadline=None)
@given(gpus=st.lists(st.sampled_from([0, 0, 0, 1, 1, 2, 3, 4, 8, 16]), min_size=1, max_size=40),
       budget=st.integers(0, 64), start=st.integers(0, 45))
def test_rank_tree_answers_its_queries_as_a_walk_over_the_positions(gpus: list[int], budget: int, start: int) -> None:
    """The segment tree LAS's pass reads (plait.schedule.rank_tree), against a plain walk over the same positions
    (0: no job): the first position where the running sum passes the budget, the first job at or after a position
    that fits the budget, the GPUs before a position; after clearing a position as well."""
    from plait.schedule.rank_tree import RankTree

    tree = RankTree(len(gpus))
    for at, n in enumerate(gpus):
        tree.set(at, n)
    for _ in range(2):
        sums = [sum(gpus[:at + 1]) for at in range(len(gpus))]
        over = next((at for at, s in enumerate(sums) if s > budget), tree.size)
        begin = start % tree.size
        fits = next((at for at in range(begin, len(gpus)) if 0 < gpus[at] <= budget), -1)
        assert tree.first_over(budget) == over
        assert tree.first_fitting(begin, budget) == fits
        assert [tree.prefix(at) for at in range(len(gpus))] == [s - n for s, n in zip(sums, gpus, strict=True)]
        gpus[start % len(gpus)] = 0
        tree.set(start % len(gpus), 0)


@settings(max_examples=150, deadline=None)
@given(free=st.lists(st.integers(0, 8), min_size=1, max_size=24), gpus=st.integers(1, 64))
def test_packed_placement_takes_the_nodes_a_node_at_a_time_walk_takes(free: list[int], gpus: int) -> None:
    """Pool.packed against the rule it states, walked over the nodes one at a time: on one node where one holds
    them all (the tightest, the lowest index among equally tight ones); else the freest nodes whole (the lowest
    index first among equals) until the rest fits on a node not taken, then the rest on the tightest such node."""
    from plait.schedule.pool import Placement

    pool = Pool(get_cluster(CLUSTER), 8 * len(free))
    for node, f in enumerate(free):
        if f < 8:
            pool.take(Placement(nodes=((node, 8 - f),)))
    want: tuple[tuple[int, int], ...] | None = None
    tightest = sorted((f, node) for node, f in enumerate(free) if f >= gpus)
    if tightest:
        want = ((tightest[0][1], gpus),)
    elif sum(free) >= gpus:
        order, taken, left = sorted(range(len(free)), key=lambda n: (-free[n], n)), [], gpus
        for at, node in enumerate(order):
            holding = sorted((free[n], n) for n in order[at:] if free[n] >= left)
            if holding:
                taken.append((holding[0][1], left))
                break
            taken.append((node, free[node]))
            left -= free[node]
        want = tuple(sorted(taken))
    got = pool.packed(gpus)
    assert (None if got is None else got.nodes) == want
