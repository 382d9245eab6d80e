"""DreamDDP's profiled schedule (arXiv 2502.11058; artifact ``determine_comm_schedule``): the exact optimum against
every cut on small cases, a hand-worked case, and the per-unit times against their formulas on the toy cluster."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from plait.cost.partial_times import profiled_steps, schedule_exposed_s, unit_times
from plait.hardware.catalog import cluster_from_mapping
from plait.plan.partial import schedule
from plait.plan.partial_profiled import exposed_run_s, profiled_schedule
from plait.workload.catalog import resolve_model
from plait.workload.tensors import parameter_shapes
from tests.conftest import toy_cluster_mapping

MODEL = Path(__file__).resolve().parents[1] / "examples" / "tiny-model.toml"


def test_a_hand_worked_case() -> None:
    """Backward 1 s per unit (ready at 1, 2, 3, 4; the pass ends at 4), all-reduces 2.5, 0.5, 0.5, 0.2 s, H = 2.
    Step 0 with units 0, 1 ends at 4.0 (hidden); unit 2 would end at 4.5. Step 1 with units 2, 3 runs 3-3.5 and
    4-4.2: 0.2 s exposed. Sending unit 2 at step 0 costs 0.5 + 0.2; so does everything at once, 0.7; units 1-3 at
    step 1 tie at 0.2 and lose the tie (fewer units sent first, as the artifact's branch)."""
    steps, total = profiled_schedule([1.0] * 4, [2.5, 0.5, 0.5, 0.2], 2)
    assert steps == [0, 0, 1, 1] and total == pytest.approx(0.2)
    assert exposed_run_s([1.0] * 4, [2.5, 0.5, 0.5, 0.2], 0, 3) == pytest.approx(0.5)


@pytest.mark.parametrize("seed", range(6))
def test_the_schedule_is_the_least_exposed_of_every_cut(seed: int) -> None:
    draw = random.Random(seed)
    units, every = draw.randint(2, 7), draw.randint(1, 4)
    backward = [draw.uniform(0.1, 1.0) for _ in range(units)]
    comm = [draw.uniform(0.0, 1.5) for _ in range(units)]
    steps, total = profiled_schedule(backward, comm, every)
    best = min(sum(exposed_run_s(backward, comm, a, b) for a, b in zip((0, *cuts), (*cuts, units)))
               for cuts in itertools.combinations_with_replacement(range(units + 1), every - 1))
    assert total == pytest.approx(best, abs=1e-12)
    assert steps == sorted(steps) and len(steps) == units and all(0 <= s < every for s in steps)
    runs = [[k for k in range(units) if steps[k] == s] for s in range(every)]
    assert sum(exposed_run_s(backward, comm, r[0], r[-1] + 1) for r in runs if r) == pytest.approx(total, abs=1e-12)


def test_unit_times_follow_their_formulas_on_the_toy_cluster() -> None:
    """Toy GPU: 1000 TFLOP/s bf16 at efficiency 1; 4 replicas in one node over 100 GB/s, no latency. A unit's
    backward is 4 T N_gemm / 1e15 s (Narayanan et al. 2021: twice the forward's 2 T N); its fp32 ring all-reduce
    2 (4 - 1) / 4 x 4 N / 1e11 s (Patarasuk & Yuan 2009)."""
    named = parameter_shapes(resolve_model(str(MODEL)))
    cluster = cluster_from_mapping(toy_cluster_mapping(), "toy")
    units, backward, comm = unit_times(named, cluster, 4, 1, 256)
    assert units[0] == "head" and units[-1] == "embeddings" and units[1:-1] == sorted(units[1:-1], reverse=True)
    for unit, b, c in zip(units, backward, comm):
        prefix = {"head": ("norm.", "output."), "embeddings": ("tok_embeddings.",)}.get(unit, (unit + ".",))
        mine = [(n, s) for n, s in named if n.startswith(prefix)]
        elements = sum(s[0] * (s[1] if len(s) > 1 else 1) for _, s in mine)
        gemm = sum(s[0] * s[1] for n, s in mine if len(s) == 2 and unit != "embeddings")
        assert b == pytest.approx(4 * 256 * gemm / 1e15, rel=1e-9)
        assert c == pytest.approx(1.5 * 4 * elements / 1e11, rel=1e-9)


def test_the_profiled_cut_exposes_no_more_than_the_parameter_count_cut() -> None:
    """On gpt3-125m over 64 replicas of the toy cluster's tiers (8 per node, 10 GB/s between nodes)."""
    named = parameter_shapes(resolve_model("gpt3-125m"))
    cluster = cluster_from_mapping(toy_cluster_mapping(), "toy")
    for every in (2, 4, 8):
        steps, exposed = profiled_steps(named, cluster, 64, 1, 2048, every)
        assert exposed == pytest.approx(schedule_exposed_s(named, steps, cluster, 64, 1, 2048, every), rel=1e-12)
        assert exposed <= schedule_exposed_s(named, schedule(named, every), cluster, 64, 1, 2048, every) + 1e-15


def test_a_batch_of_plans_prices_the_new_schedules_as_each_plan_alone() -> None:
    """DreamDDP's profiled rows and gossip's delay-by-one rows (whose exposure depends on the row's compute) cost
    the same in a mixed batch as alone."""
    from plait.cost.batch import evaluate_batch
    from plait.engine.catalog import get_engine
    from plait.hardware.catalog import get_cluster
    from plait.plan.columns import PlanColumns
    from plait.plan.plan import Plan
    from plait.workload.catalog import get_model

    model, cluster, framework = get_model("gpt3-125m"), get_cluster("dgx1-v100"), get_engine().framework
    plans = [Plan(dp_replicate=dp, tp=tp, micro_batch=mb, global_batch=64, sharding="none", dp_sync=sync)
             for dp, tp in ((8, 1), (16, 2)) for mb in (1, 2)
             for sync in ("allreduce", "dreamddp:every=4", "dreamddp:every=4,schedule=profiled",
                          "gossip:topology=ring,delay=1", "gossip:topology=random_ring")]
    batch = evaluate_batch(model, cluster, PlanColumns.from_plans(plans), framework)
    for i, plan in enumerate(plans):
        single = evaluate_batch(model, cluster, PlanColumns.one(plan), framework)
        for name in ("dp_comm", "compute"):
            assert batch.time[name][i] == pytest.approx(single.time[name], rel=1e-12, abs=1e-15), (plan.dp_sync, name)
    profiled = [batch.time["dp_comm"][i] for i, p in enumerate(plans) if "profiled" in p.dp_sync.spec]
    assert all(x > 0 for x in profiled)
