"""Each device group of a mixed pipeline split at its own tensor-parallel degree (plait.search.mixed_tp)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.hardware.mixed import DeviceGroup, MixedCluster
from plait.hardware.mixed_catalog import get_mixed_cluster
from plait.plan.io import JobSpec, plan_to_toml, read_plan_parts
from plait.plan.mixed import GroupShare, MixedPlan, per_stage_plan
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.predict.mixed import estimate_mixed, mixed_layout
from plait.search.mixed_tp import group_degrees
from plait.workload.catalog import get_model

MODEL = get_model("llama3-8b")
ENGINE = get_engine()
# 64 + 64 GPUs, dp 8: group x at tp4 holds 64 / (4 x 8) = 2 stages, group y at tp2 holds 64 / (2 x 8) = 4
LAYOUT = Plan(tp=4, pp=6, dp_shard=8, sharding="zero1", micro_batch=1, global_batch=512,
              stage_tp=(4, 4, 2, 2, 2, 2))
SHARES = (GroupShare(group="x", num_gpus=64, layers=(6, 6)), GroupShare(group="y", num_gpus=64, layers=(5, 5, 5, 5)))


def _two() -> MixedCluster:
    """Two groups of 64 DGX H100 GPUs joined by the DGX H100 fabric's own outer tier: one device kind."""
    c = get_cluster("dgx-h100-ib")
    return MixedCluster(name="two", groups=(DeviceGroup(name="x", cluster=c, num_gpus=64),
                                            DeviceGroup(name="y", cluster=c, num_gpus=64)),
                        join=replace(c.tiers[-1], span_gpus=128), source="test")


def test_groups_of_one_kind_at_their_own_degree_equal_the_per_stage_plan() -> None:
    """Two groups of one kind at tp4 and tp2 are the homogeneous per-stage plan of those degrees and layers,
    simulated (plait.cost.per_stage, the same scatter/gather boundary): the mixed path costs each stage on its
    group's view, the per-stage path on the one cluster."""
    mixed = MixedPlan(plan=mixed_layout(MODEL, LAYOUT), split="pipeline", shares=SHARES)
    est = estimate_mixed(MODEL, _two(), mixed, engine=ENGINE)
    ref = estimate(MODEL, get_cluster("dgx-h100-ib"), replace(LAYOUT, stage_layers=(6, 6, 5, 5, 5, 5)),
                   simulate=True, engine=ENGINE)
    assert est.step_time_s == pytest.approx(ref.step_time_s, rel=1e-9)
    assert [g.num_gpus for g in est.groups] == [32, 32, 16, 16, 16, 16]  # a stage: its degree x dp


@pytest.mark.parametrize(("stage_tp", "shares", "message"), [
    ((4, 2, 4, 2, 2, 2), SHARES, r"group x: its stages take one TP degree \(stage_tp gives \[2, 4\]\)"),
    ((2, 2, 4, 4, 2, 2), SHARES, r"group x: num_gpus=64 must be its 2 stages x tp\*cp\*dp=16"),
])
def test_bad_group_degrees_are_refused_by_name(stage_tp: tuple[int, ...], shares: tuple, message: str) -> None:
    """The GPUs add up to 128 either way: (4 + 2 + 4 + 2 + 2 + 2) x 8 and (2 + 2 + 4 + 4 + 2 + 2) x 8."""
    mixed = MixedPlan(plan=mixed_layout(MODEL, replace(LAYOUT, tp=stage_tp[0], stage_tp=stage_tp)), split="pipeline",
                      shares=shares)
    with pytest.raises(ConfigError, match=message):
        estimate_mixed(MODEL, _two(), mixed, engine=ENGINE)


def test_stage_tp_belongs_to_a_pipeline_split() -> None:
    data = MixedPlan(plan=mixed_layout(MODEL, LAYOUT), split="data",
                     shares=(GroupShare(group="x", num_gpus=64, batch=256), GroupShare(group="y", num_gpus=64,
                                                                                      batch=256)))
    with pytest.raises(ConfigError, match="stage_tp alone of the per-stage fields, with a pipeline split"):
        estimate_mixed(MODEL, _two(), data, engine=ENGINE)


def test_group_degrees_give_the_slower_group_at_least_the_faster_ones() -> None:
    """tp2 pp4 dp16 on 64 V100 + 64 A100, by hand: each group may take 1, 2 or 4 (64 divisible by d x 16, within
    the 8-GPU NVLink domains, 64 heads and 8 KV heads divisible); the V100 (lower 16-bit peak) never below the
    A100; the patterns that change one group first: (2, 1), (4, 2), then (4, 1)."""
    layout = Plan(tp=2, pp=4, dp_shard=16, sharding="zero1", micro_batch=1, global_batch=1024)
    assert group_degrees(get_model("llama3-70b"), get_mixed_cluster("v100-a100-ib"), layout) == [(2, 1), (4, 2),
                                                                                                  (4, 1)]


def test_a_mixed_plan_file_keeps_each_groups_degree(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "plan.toml"
    mixed = MixedPlan(plan=LAYOUT, split="pipeline", shares=SHARES)
    path.write_text(plan_to_toml(LAYOUT, JobSpec(model="llama3-8b", cluster="a100-h100-ib", gpus=128), mixed))
    _, plan, read = read_plan_parts(path)
    assert plan.stage_tp == (4, 4, 2, 2, 2, 2) and read is not None and read.shares == SHARES


def test_a_run_takes_the_shares_layers_in_the_plan_at_one_speed() -> None:
    """V100 stage on a TP pair with 3 layers, A100 stage on one rank with 1: the runtime's stage-TP loop trains the
    plan with stage_layers (3, 1) from the shares, no uneven options, unslowed (it has no --slowdown)."""
    from pathlib import Path

    from plait.run.mixed_run import resolve_mixed_run
    from plait.run.uneven import Uneven
    from plait.workload.catalog import resolve_model

    model = resolve_model(str(Path(__file__).parents[1] / "examples" / "tiny-model.toml"))
    plan = Plan(tp=2, pp=2, sp=False, micro_batch=2, global_batch=8, seq_len=model.seq_len, stage_tp=(2, 1))
    mixed = MixedPlan(plan=plan, split="pipeline", shares=(GroupShare(group="v100", num_gpus=2, layers=(3,)),
                                                           GroupShare(group="a100", num_gpus=1, layers=(1,))))
    assert per_stage_plan(mixed) == replace(plan, stage_layers=(3, 1))
    run = resolve_mixed_run(JobSpec(cluster="v100-a100-ib"), mixed, model, ENGINE)
    assert run.uneven == Uneven() and "at one speed" in run.note()
