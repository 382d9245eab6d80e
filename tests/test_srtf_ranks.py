"""SRTF reads only the running jobs whose rank may trail the first waiting job, and after arrivals alone starts
them without a walk or walks from the first of them (:mod:`plait.schedule.srtf_ranks`): the same schedule as a pass
that recomputes every running job's rank and walks from the queue's head, on random busy traces (the toy speed model
of tests/test_schedule_properties.py, so that only the scheduler is checked)."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plait.hardware.catalog import get_cluster
from plait.schedule import policies, srtf_ranks
from plait.schedule.pool import Pool
from plait.schedule.simulate import Simulator, simulate
from plait.schedule.state import JobState
from plait.schedule.trace import TraceJob
from tests.test_schedule_properties import CLUSTER, fingerprint, toy_speed, toy_trace


class EveryRank:
    """SRTF as it was before the bounds: every running job's rank recomputed at every pass."""

    name = "srtf"
    queued_key = policies.Srtf.queued_key

    def schedule(self, sim: Simulator, now_s: float) -> None:
        if sim.ranked:
            idx = sim.running_indices()
            rank = sim.columns.remaining(idx, now_s) / sim.columns.asked_tokens_per_s[idx]
            policies.preemptive_pass(sim, now_s, idx, rank)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), gap_s=st.sampled_from([30.0, 300.0, 3_000.0]), nodes=st.sampled_from([2, 4]))
def test_srtf_with_rank_bounds_gives_the_schedule_of_every_rank_recomputed(seed: int, gap_s: float,
                                                                          nodes: int) -> None:
    jobs, pool = toy_trace(seed, 40, gap_s), lambda: Pool(get_cluster(CLUSTER), 8 * nodes)
    bounded = simulate(jobs, pool(), toy_speed(), policies.Srtf())
    reference = simulate(jobs, pool(), toy_speed(), EveryRank())  # type: ignore[arg-type]
    assert bounded == reference  # every job's finish, sizes and preemptions and every segment, exactly
    assert fingerprint(bounded) == fingerprint(reference)
    assert bounded.summary()["preemptions"] == reference.summary()["preemptions"]


@dataclass
class CountingArrivals(srtf_ranks.Arrivals):
    """SRTF's log of arrivals, counting the passes that start arrivals without a walk and those that walk from the
    first arrival."""

    fit_free_passes: int = 0
    suffix_passes: int = 0

    def fit_free(self, sim: Simulator) -> list[JobState] | None:
        arrivals = super().fit_free(sim)
        self.fit_free_passes += arrivals is not None
        return arrivals

    def first_change(self, sim: Simulator) -> int:
        first = super().first_change(sim)
        self.suffix_passes += first > 0
        return first


@pytest.mark.parametrize(("seed", "gap_s", "nodes"), [(0, 300.0, 2), (7, 30.0, 4)])
def test_srtf_arrival_shortcuts_give_the_schedule_of_every_rank_recomputed(seed: int, gap_s: float,
                                                                          nodes: int) -> None:
    """The passes after arrivals alone (started without a walk, or walked from the first arrival) happen on these
    traces, and the schedule is still the one of every rank recomputed at every pass, from the queue's head."""
    jobs, pool = toy_trace(seed, 40, gap_s), lambda: Pool(get_cluster(CLUSTER), 8 * nodes)
    log = CountingArrivals()
    shortcut = simulate(jobs, pool(), toy_speed(), policies.Srtf(log=log))
    reference = simulate(jobs, pool(), toy_speed(), EveryRank())  # type: ignore[arg-type]
    assert log.fit_free_passes > 0 and log.suffix_passes > 0
    assert shortcut == reference


def test_srtf_walks_when_a_job_completes_as_another_arrives() -> None:
    """On 16 GPUs: A (10 min) and B (2 h) run from 0; W (10 h) arrives at 1 s and waits behind B; C (20 h) arrives
    the instant A completes. A's 8 GPUs go to W, ranked before C, although C alone would fit them: a pass after a
    completion walks from the queue's head."""
    speed = toy_speed()
    tokens_per_s = speed.at("gpt3-125m", 8).tokens_per_s  # type: ignore[union-attr]

    def job(name: str, arrival_s: float, seconds: float) -> TraceJob:
        return TraceJob(job_id=name, arrival_s=arrival_s, model="gpt3-125m", gpus=8, tokens=seconds * tokens_per_s)

    a_done_s = 0.0 + job("A", 0.0, 600.0).tokens / tokens_per_s  # the simulator's finish: start + tokens / speed
    jobs = (job("A", 0.0, 600.0), job("B", 0.0, 7_200.0), job("W", 1.0, 36_000.0), job("C", a_done_s, 72_000.0))
    result = simulate(jobs, Pool(get_cluster(CLUSTER), 16), speed, policies.Srtf())
    first_start = {j.job_id: j.first_start_s for j in result.jobs}
    assert first_start["W"] == a_done_s and first_start["C"] > a_done_s
    assert result == simulate(jobs, Pool(get_cluster(CLUSTER), 16), toy_speed(), EveryRank())  # type: ignore[arg-type]


def test_running_jobs_are_placed_among_waiting_ones_by_rank_then_arrival_then_position() -> None:
    """Waiting keys (rank, arrival, trace position) (1, 0, 0), (2, 5, 1), (3, 1, 2); running jobs 3..7 of ranks
    0.5, 2, 3, 4, 2.5 and arrivals 0, 3, 9, 0, 0. Job 4 ties job 1's rank and arrived first: before it (gap 1); job
    5 ties job 2's and arrived later: after it, after all three (gap 3); job 6 ranks after all (gap 3)."""
    chunk = np.array([[1.0, 0.0, 0.0], [2.0, 5.0, 1.0], [3.0, 1.0, 2.0]])
    cols = SimpleNamespace(arrival_s=np.array([0.0, 5.0, 1.0, 0.0, 3.0, 9.0, 0.0, 0.0]))
    rank, index = np.array([0.5, 2.0, 3.0, 4.0, 2.5]), np.arange(3, 8)
    assert policies._gaps(chunk, rank, index, cols).tolist() == [0, 1, 3, 3, 2]  # type: ignore[arg-type]
