"""SRTF reads only the running jobs whose rank may trail the first waiting job (:mod:`plait.schedule.srtf_ranks`):
the same schedule as a pass that recomputes every running job's rank, on random busy traces (the toy speed model
of tests/test_schedule_properties.py, so that only the scheduler is checked)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plait.hardware.catalog import get_cluster
from plait.schedule import policies
from plait.schedule.pool import Pool
from plait.schedule.simulate import Simulator, simulate
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
