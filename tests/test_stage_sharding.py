"""Per-stage sharding (``Plan.stage_sharding``): the field where it enters, each stage costed as the uniform plan it
runs, the planner's program over (mode, sharding) against brute force, and a plan it finds that no uniform
sharding reaches."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plait.cost.batch import evaluate_batch
from plait.cost.per_stage import evaluate_per_stage
from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.job import Job
from plait.plan.columns import PlanColumns
from plait.plan.io import plan_to_toml, read_plan_file
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.search.per_stage import improve
from plait.search.stage_dp import sharded_program
from plait.simulate.costs import stage_memories
from plait.workload.catalog import resolve_model

MODEL, CLUSTER, ENGINE = resolve_model("llama3-70b"), get_cluster("dgx-h100-ib"), get_engine("plait")
PLAN = Plan(tp=8, sp=True, pp=4, dp_shard=2, sharding="zero1", micro_batch=1, global_batch=64, seq_len=8192)


def test_fields_round_trip_and_each_stage_runs_its_own() -> None:
    plan = Plan(pp=2, dp_shard=2, sharding="zero3", stage_sharding=("zero3", "zero1"), global_batch=16)
    assert plan.describe().endswith("stages[n/z3,n/z1]")
    assert [plan.for_stage(s).sharding for s in (0, 1)] == ["zero3", "zero1"]
    assert plan.uniform().sharding == "zero3" and not plan.uniform().per_stage


def test_the_plan_file_keeps_them(tmp_path: Path) -> None:
    plan = Plan(pp=2, dp_shard=2, sharding="zero2", stage_sharding=("zero2", "zero1"), global_batch=16)
    (tmp_path / "p.toml").write_text(plan_to_toml(plan))
    assert read_plan_file(tmp_path / "p.toml")[1] == plan


@pytest.mark.parametrize(("fields", "fragment"), [
    ({"stage_sharding": ("zero1",)}, "one per pipeline stage (pp=2)"),
    ({"stage_sharding": ("zero1", "zero4")}, "'zero4' must be one of"),
    ({"sharding": "zero3", "stage_sharding": ("zero1", "zero3")}, "must be the first stage's"),
])
def test_bad_entries_are_refused_where_they_enter(fields: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        Plan(pp=2, dp_shard=2, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(("fields", "fragment"), [
    ({"dp_replicate": 2, "dp_shard": 1, "sharding": "zero1", "stage_sharding": ("zero1", "zero3")},
     "dp_shard=1 must be >= 2"),
    ({"stage_sharding": ("zero1", "none")}, "stage 1 (stage_sharding='none'): dp_shard=2 needs sharding"),
    ({"sharding": "zero3", "offload_params": True, "stage_sharding": ("zero3", "zero1")},
     "stage 1 (stage_sharding='zero1'): offload_params needs sharding='zero3'"),
])
def test_each_stage_meets_the_plan_rules(fields: dict[str, object], fragment: str) -> None:
    plan = Plan(tp=8, pp=2, global_batch=64, **{"dp_shard": 2, "sharding": "zero1", **fields})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        Job.build(MODEL, CLUSTER, plan, ENGINE)


def test_every_stage_alike_costs_as_the_uniform_plan() -> None:
    uniform = replace(PLAN, sharding="zero2")
    want = evaluate_batch(MODEL, CLUSTER, PlanColumns.one(uniform), ENGINE.framework)
    got = evaluate_per_stage(MODEL, CLUSTER, PlanColumns.one(replace(uniform, stage_sharding=("zero2",) * 4)),
                             ENGINE.framework)
    for key, value in want.time.items():
        assert got.time[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key
    assert got.memory["total"] == pytest.approx(want.memory["total"], rel=1e-12)


def test_each_stage_holds_what_its_uniform_plan_holds_there() -> None:
    """Stage s of [zero3, zero1, zero2, zero1] = stage s of the uniform plan of its ZeRO stage (the uniform plans
    costed over all stages at once, the vectorized path), for every memory item."""
    shardings = ("zero3", "zero1", "zero2", "zero1")
    mixed = stage_memories(Job.build(MODEL, CLUSTER, replace(PLAN, sharding="zero3", stage_sharding=shardings),
                                     ENGINE))
    for stage, sharding in enumerate(shardings):
        alone = stage_memories(Job.build(MODEL, CLUSTER, replace(PLAN, sharding=sharding), ENGINE))[stage]
        assert mixed[stage] == pytest.approx(alone, rel=1e-12), (stage, sharding)


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 3), st.integers(1, 20), st.data())
def test_program_finds_the_brute_force_optimum(p: int, m: int, data: st.DataObject) -> None:
    """m max t + (p - 1) mean t + max tail over every split (1..3 layers a stage) and choice (4), enumerated."""
    counts, num_layers, choices = np.array([1, 2, 3]), 2 * p, 4
    size = p * 3 * choices
    t = np.array(data.draw(st.lists(st.floats(0.1, 10.0), min_size=size, max_size=size))).reshape(p, 3, choices)
    fits = np.array(data.draw(st.lists(st.booleans(), min_size=size, max_size=size))).reshape(p, 3, choices)
    tail = np.array(data.draw(st.lists(st.floats(0.0, 20.0), min_size=choices, max_size=choices)))

    def cost(layers: tuple[int, ...], picks: tuple[int, ...]) -> float:
        times = [t[s, n - 1, k] for s, (n, k) in enumerate(zip(layers, picks))]
        return m * max(times) + (p - 1) * sum(times) / p + max(tail[k] for k in picks)

    best = None
    for layers in itertools.product((1, 2, 3), repeat=p):
        if sum(layers) != num_layers:
            continue
        for picks in itertools.product(range(choices), repeat=p):
            if all(fits[s, n - 1, k] for s, (n, k) in enumerate(zip(layers, picks))):
                best = cost(layers, picks) if best is None else min(best, cost(layers, picks))
    found = sharded_program(t, fits, tail, counts, num_layers, m)
    if best is None:
        assert found is None
        return
    assert found is not None and sum(found[0]) == num_layers
    assert cost(*found) == pytest.approx(best, rel=1e-6)


def test_planner_shards_the_first_stage_more_where_it_holds_more() -> None:
    """llama2-13b, 4k sequences, 16 A100-40GB, megatron-core's facts (ZeRO-3 re-gathers weights every micro-batch;
    ZeRO-1 and ZeRO-3 run, ZeRO-2 does not), tp2 pp2 dp4: without recomputation ZeRO-1 does not fit on the first
    stage (2 micro-batches in flight) and ZeRO-3 fits but gathers. The program keeps ZeRO-3 on the first stage and
    ZeRO-1 on the second, which fits and beats every uniform plan of this layout listed here and the per-stage plans
    whose stages shard alike."""
    model, cluster, engine = resolve_model("llama2-13b"), get_cluster("dgx-a100-40gb"), get_engine("megatron-core")
    plan = Plan(tp=2, sp=True, pp=2, dp_shard=4, sharding="zero1", micro_batch=1, global_batch=256, seq_len=4096)
    limit = cluster.accelerator.memory_bytes * 0.95
    uniform = [estimate(model, cluster, replace(plan, sharding=z, recompute=r, recompute_layers=k), engine=engine,
                        simulate=False)
               for z in ("zero1", "zero3") for r, k in (("none", -1), ("selective", -1), ("full", -1), ("full", 10))]
    zero1 = uniform[0]
    assert zero1.memory.total_bytes > limit and zero1.memory.stage == 0
    fitting = [e for e in uniform if e.memory.total_bytes <= limit]
    wins = improve(model, cluster, engine, fitting, 0.05, simulate=False)
    assert wins and wins[0].better.plan.stage_sharding == ("zero3", "zero1")
    better = wins[0].better
    assert better.memory.total_bytes <= limit and better.step_time_s < min(e.step_time_s for e in fitting)
    alike = improve(model, cluster, engine, fitting, 0.05, simulate=False, vary_sharding=False)
    assert all(w.better.step_time_s > better.step_time_s for w in alike)


def test_the_runtime_refuses_a_stage_it_cannot_run() -> None:
    """plait's runtime shards no DTensor optimizer state with ZeroRedundancyOptimizer: a ZeRO-1 stage under TP is
    refused (by ``plait run`` before any rank starts, by the exporter, and named in an estimate), naming the stage."""
    from plait.engine.capability import first_unsupported

    plan = Plan(tp=8, pp=2, dp_shard=2, sharding="zero3", stage_sharding=("zero3", "zero1"), global_batch=64)
    refusal = first_unsupported(plan, MODEL, ENGINE, "cpu")
    assert refusal is not None and refusal.startswith("stage 1: sharding='zero1' with tp=8 is not supported by plait")
    assert first_unsupported(replace(plan, stage_sharding=("zero3", "zero2")), MODEL, ENGINE, "cpu") is None
