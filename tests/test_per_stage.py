"""Per-stage recomputation and layer counts: the plan fields where they enter, their cost against the uniform
estimate (a different assembly of the same stage functions), invariants over random per-stage modes, and the
planner's dynamic program against brute force."""

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
from plait.search.stage_dp import program
from plait.workload.catalog import resolve_model
from tests.inprocess import cli

MODEL, CLUSTER, ENGINE = resolve_model("llama3-70b"), get_cluster("dgx-h100-ib"), get_engine()
PLAN = Plan(tp=8, sp=True, pp=4, dp_shard=2, sharding="zero1", micro_batch=1, global_batch=64, seq_len=8192)


def closed(plan: Plan):  # type: ignore[no-untyped-def]
    return estimate(MODEL, CLUSTER, plan, engine=ENGINE, simulate=False)


@pytest.mark.parametrize("mode", ["none", "selective", "full"])
def test_every_stage_alike_costs_as_the_uniform_plan(mode: str) -> None:
    """The per-stage assembly over all four stages = evaluate_batch's over the first, middle and last."""
    uniform = replace(PLAN, recompute=mode)
    staged = replace(uniform, stage_recompute=(mode,) * 4, stage_layers=(20, 20, 20, 20))
    want = evaluate_batch(MODEL, CLUSTER, PlanColumns.one(uniform), ENGINE.framework)
    got = evaluate_per_stage(MODEL, CLUSTER, PlanColumns.one(staged), ENGINE.framework)
    for key, value in want.time.items():
        assert got.time[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key
    assert got.memory["total"] == pytest.approx(want.memory["total"], rel=1e-12)
    assert got.memory_stage == want.memory_stage


@settings(max_examples=12, deadline=None)
@given(st.lists(st.sampled_from(["none", "selective", "full"]), min_size=4, max_size=4))
def test_mixed_modes_lie_between_the_uniform_extremes(modes: list[str]) -> None:
    """Recomputing on some stages: step time between none everywhere and full everywhere; peak memory at most
    that of none everywhere (1F1B's stage s holds 4 - s micro-batches whatever the others do)."""
    staged = closed(replace(PLAN, recompute=modes[0], stage_recompute=tuple(modes)))
    none, full = closed(PLAN), closed(replace(PLAN, recompute="full"))
    assert none.step_time_s * (1 - 1e-12) <= staged.step_time_s <= full.step_time_s * (1 + 1e-12)
    assert full.memory.total_bytes * (1 - 1e-12) <= staged.memory.total_bytes <= none.memory.total_bytes * (1 + 1e-12)


def test_recomputing_the_first_stage_alone_lowers_the_peak() -> None:
    """Stage 0 holds the most in-flight activations (4 of 4): full recomputation there alone lowers the peak,
    which moves to another stage."""
    none = closed(PLAN)
    first = closed(replace(PLAN, recompute="full", stage_recompute=("full", "none", "none", "none")))
    assert none.memory.stage == 0
    assert first.memory.total_bytes < none.memory.total_bytes and first.memory.stage != 0


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 3), st.integers(1, 40), st.data())
def test_program_finds_the_brute_force_optimum(p: int, m: int, data: st.DataObject) -> None:
    """m max t + (p - 1) mean t over every split (layers 1..3 a stage, 3 modes) and mode, enumerated."""
    counts, num_layers = np.array([1, 2, 3]), 2 * p
    t = np.array(data.draw(st.lists(st.floats(0.1, 10.0), min_size=9 * p, max_size=9 * p))).reshape(p, 3, 3)
    fits = np.array(data.draw(st.lists(st.booleans(), min_size=9 * p, max_size=9 * p))).reshape(p, 3, 3)
    best = None
    for choice in itertools.product(range(9), repeat=p):
        picks = [divmod(c, 3) for c in choice]
        if sum(counts[j] for j, _ in picks) != num_layers or not all(fits[s, j, k] for s, (j, k) in enumerate(picks)):
            continue
        times = [t[s, j, k] for s, (j, k) in enumerate(picks)]
        cost = m * max(times) + (p - 1) * sum(times) / p
        best = cost if best is None else min(best, cost)
    found = program(t, fits, counts, num_layers, m)
    if best is None:
        assert found is None
        return
    assert found is not None
    layers, modes = found
    index = {"none": 0, "selective": 1, "full": 2}
    times = [t[s, n - 1, index[r]] for s, (n, r) in enumerate(zip(layers, modes))]
    assert sum(layers) == num_layers
    assert m * max(times) + (p - 1) * sum(times) / p == pytest.approx(best, rel=1e-6)


def test_plan_fields_round_trip_through_the_plan_file(tmp_path: Path) -> None:
    plan = Plan(pp=2, recompute="full", stage_recompute=("full", "none"), stage_layers=(3, 1), global_batch=16)
    (tmp_path / "p.toml").write_text(plan_to_toml(plan))
    assert read_plan_file(tmp_path / "p.toml")[1] == plan
    assert plan.describe().endswith("stages[3f,1n]")
    assert [plan.for_stage(s).recompute for s in (0, 1)] == ["full", "none"]
    assert not plan.for_stage(1).per_stage


@pytest.mark.parametrize(("fields", "fragment"), [
    ({"pp": 2, "stage_recompute": ("none",)}, "one per pipeline stage (pp=2)"),
    ({"pp": 2, "stage_recompute": ("none", "some")}, "'some' must be one of"),
    ({"pp": 2, "recompute": "none", "stage_recompute": ("full", "none")}, "must be the first stage's mode"),
    ({"pp": 2, "stage_layers": (0, 80)}, "must be an integer in 1.."),
])
def test_bad_fields_are_refused_where_they_enter(fields: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        Plan(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(("fields", "fragment"), [
    ({"pp": 2, "stage_layers": (40, 39)}, "sums to 79"),
    ({"pp": 4, "vpp": 2, "schedule": "interleaved", "stage_layers": (20, 20, 20, 20)}, "one model chunk per rank"),
    ({"pp": 2, "stage_layers": (40, 40), "dp_replicate": 4, "dp_sync": "local_sgd:every=4"}, "under the all-reduce"),
])
def test_rules_against_the_model(fields: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        Job.build(MODEL, CLUSTER, Plan(tp=8, global_batch=64, **fields), ENGINE)  # type: ignore[arg-type]


def test_a_bad_plan_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[job]\nmodel = "llama3-70b"\n[plan]\ntp = 8\npp = 2\nstage_layers = [40, 39]\n')
    code, _, err = cli(["estimate", "--plan", str(path)])
    assert code == 2 and "sums to 79" in err and "Traceback" not in err


def test_planner_recomputes_only_where_memory_binds() -> None:
    """llama2-13b, 4k sequences, on 16 A100-40GB under Megatron-LM 2022: the pipeline tp2 pp2 zero2 does not fit
    without recomputation (1F1B's first stage holds 2 micro-batches); the dynamic program keeps selective
    recomputation on the first stage alone and moves a layer off it, which fits and is faster than selective
    recomputation on both stages."""
    model, cluster, engine = resolve_model("llama2-13b"), get_cluster("dgx-a100-40gb"), get_engine("megatron-lm@2022")
    plan = Plan(tp=2, sp=True, pp=2, dp_shard=4, sharding="zero2", recompute="selective", micro_batch=1,
                global_batch=256, seq_len=4096, offload_optimizer=True)
    limit = cluster.accelerator.memory_bytes * 0.95
    none = estimate(model, cluster, replace(plan, recompute="none"), engine=engine, simulate=False)
    assert none.memory.total_bytes > limit and none.memory.stage == 0
    wins = improve(model, cluster, engine, [estimate(model, cluster, plan, engine=engine)], 0.05)
    assert len(wins) == 1
    staged = wins[0].better.plan
    assert staged.stage_recompute[0] in ("selective", "full") and staged.stage_recompute[1] == "none"
    assert staged.stage_layers and staged.stage_layers[0] < staged.stage_layers[1]
    assert wins[0].better.memory.total_bytes <= limit and wins[0].gain > 0


def test_an_engine_export_refuses_a_per_stage_plan() -> None:
    from plait.export.bundle import export_for

    plan = replace(PLAN, recompute="full", stage_recompute=("full", "none", "none", "none"))
    with pytest.raises(ConfigError, match="stage_sharding and stage_tp to megatron-core"):
        export_for(Job.build(MODEL, CLUSTER, plan, get_engine("megatron-core")), "llama3-70b", "dgx-h100-ib")
    plan = replace(plan, sharding="zero2")  # plait's runtime shards with FSDP2 under TP
    written = export_for(Job.build(MODEL, CLUSTER, plan, get_engine("plait")), "llama3-70b", "dgx-h100-ib")
    assert [a.filename for a in written] == ["plan.toml"] and "stage_recompute" in written[0].text


def test_a_mixed_plan_file_refuses_per_stage_fields(tmp_path: Path) -> None:
    from plait.plan.io import read_plan_parts

    path = tmp_path / "mixed.toml"
    path.write_text('[job]\nmodel = "llama3-70b"\n[plan]\npp = 2\nstage_layers = [40, 40]\n[mixed]\nsplit = "pipeline"\n'
                    '[[mixed.shares]]\ngroup = "a100"\nnum_gpus = 1\nlayers = [40]\n')
    with pytest.raises(ConfigError, match="a mixed plan takes no stage_recompute, stage_layers or stage_sharding"):
        read_plan_parts(path)
