"""The planner's refinement: the bound it skips simulations by never exceeds the simulation, and skipping leaves
the ranked plans and their figures exactly as simulating every candidate gives them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.job import Job
from plait.predict.estimate import assemble
from plait.search.refine import step_lower_bound_s
from plait.search.runner import REFINE, run_search
from plait.search.space import default_space
from plait.simulate.pipeline import PipelineCosts, simulate_pipeline, warmed
from plait.workload.catalog import get_model
from tests.pipeline_costs import LAYOUTS as OTHER_LAYOUTS
from tests.pipeline_costs import random_costs

LAYOUTS = [("1f1b", p, m, 1) for p, m in ((1, 4), (2, 2), (2, 64), (4, 3), (8, 8), (8, 32), (16, 16), (16, 4))]
LAYOUTS += OTHER_LAYOUTS


@pytest.mark.parametrize(("schedule", "p", "m", "v"), LAYOUTS)
def test_bound_never_exceeds_the_simulation(schedule: str, p: int, m: int, v: int) -> None:
    rng = np.random.default_rng(p * 1000 + m * 10 + v)
    for spread in (0.0, 0.1, 0.5):
        costs = random_costs(rng, schedule, p, m, v, spread)
        assert step_lower_bound_s(costs) <= simulate_pipeline(costs, record=False).step_time_s


def test_bound_is_the_1f1b_step_for_uniform_stages() -> None:
    """Uniform stages, free hops, no gradient reduction: 1F1B takes (m + p - 1)(f + b) (Narayanan et al. 2021,
    Sec. 2.2.1) and then the optimizer step, which the bound reaches up to its rounding slack."""
    p, m, f, b, hop, opt = 4, 8, 1.0, 2.0, 0.0, 0.5
    costs = PipelineCosts(p=p, m=m, v=1, schedule="1f1b", forward_s=[f] * p, backward_s=[b] * p,
                          weight_grad_s=[0.0] * p, p2p_s=hop, grad_reduce_s=[0.0] * p, param_gather_s=[0.0] * p,
                          buckets=[1] * p, overlap_grad_reduce=False, optimizer_s=[opt] * p)
    expected = (m + p - 1) * (f + b) + opt
    assert simulate_pipeline(costs, record=False).step_time_s == pytest.approx(expected, rel=1e-12)
    assert step_lower_bound_s(costs) == pytest.approx(expected, rel=1e-8)


@pytest.mark.parametrize(("model", "gpus", "batch", "k"), [("llama3-70b", 256, 512, 5), ("llama2-70b", 128, 512, 2),
                                                           ("gpt3-175b", 128, 256, 1)])
def test_top_equals_every_candidate_simulated(model: str, gpus: int, batch: int, k: int) -> None:
    spec, cluster, engine = get_model(model), get_cluster("dgx-h100-ib"), get_engine()
    result = run_search(spec, cluster, default_space(spec, cluster, gpus, (batch,)), engine=engine, workers=1)
    every = []
    for _, chunk, row in result.ranking()[:REFINE * k]:
        costed = result.feasible[chunk][1]
        every.append(assemble(Job.checked(spec, cluster, costed.cols.plan(row), engine), costed, row, simulate=True))
    every = sorted(every, key=lambda e: -e.target_tokens_per_s)[:k]
    top = result.top(k)
    assert [e.plan for e in top] == [e.plan for e in every]
    assert [e.time for e in top] == [e.time for e in every]  # to the last bit
    assert any(e.plan.pp > 1 for e in top), "the case should rank pipelines"


DEEP = [("interleaved", 8, 128, 4), ("interleaved", 4, 520, 2), ("1f1b", 8, 512, 1), ("zb-h1", 4, 512, 1)]
"""Layouts deep enough that the sweep goes on from a warm-up (more operations than are kept written out)."""


@settings(max_examples=20, deadline=None)
@given(layout=st.sampled_from(DEEP), seed=st.integers(0, 2**32 - 1), first=st.floats(0.5, 2.0),
       last=st.floats(0.5, 2.0), spread=st.floats(0.0, 0.3))
def test_warm_up_bound_between_the_bound_and_the_simulation(layout: tuple[str, int, int, int], seed: int,
                                                             first: float, last: float, spread: float) -> None:
    """Uneven end stages (the embedding on the first, the output layer on the last): the bound from the swept
    warm-up is at least the plain bound and at most the step of every period replayed; the extrapolated sweep
    going on from the warm-up gives the same step as starting afresh, to the bit."""
    schedule, p, m, v = layout
    costs = random_costs(np.random.default_rng(seed), schedule, p, m, v, spread)
    for r, scale in ((0, first), (p - 1, last)):
        costs.forward_s[r] *= scale
        costs.backward_s[r] *= scale
        costs.weight_grad_s[r] *= scale
    warm = warmed(costs)
    assert warm is not None
    replayed = simulate_pipeline(costs, record=False).step_time_s
    assert step_lower_bound_s(costs) <= step_lower_bound_s(costs, warm[1]) <= replayed
    fresh = simulate_pipeline(costs, record=False, extrapolate=True).step_time_s
    assert simulate_pipeline(costs, record=False, extrapolate=True, warm=warm[0]).step_time_s == fresh
