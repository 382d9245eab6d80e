"""Per-stage tensor parallelism (``Plan.stage_tp``): the field where it enters, each stage meeting the TP rules at
its own degree, the GPU count ``dp * cp * sum(stage_tp)``, each stage costed at its own degree, and the boundary
between stages of different degrees (Megatron's scatter/gather, Narayanan et al., SC 2021, Sec. 4.1)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.job import Job
from plait.plan.io import plan_to_toml, read_plan_file
from plait.plan.plan import Plan
from plait.predict.estimate import predict
from plait.simulate.costs import stage_memories
from plait.workload.catalog import resolve_model

MODEL, CLUSTER, ENGINE = resolve_model("llama3-70b"), get_cluster("dgx-h100-ib"), get_engine("plait")
PLAN = Plan(tp=4, sp=True, pp=4, dp_shard=2, sharding="zero1", micro_batch=1, global_batch=64, seq_len=8192)


def test_the_field_counts_its_gpus_and_each_stage_runs_its_own_degree(tmp_path: Path) -> None:
    plan = Plan(tp=2, pp=2, dp_replicate=3, global_batch=6, stage_tp=(2, 1))
    assert plan.num_gpus == 9  # dp * (2 + 1), not pp * dp * tp = 12
    assert [plan.for_stage(s).tp for s in (0, 1)] == [2, 1]
    assert plan.describe().endswith("stages[n/tp2,n/tp1]") and plan.uniform().num_gpus == 12
    (tmp_path / "p.toml").write_text(plan_to_toml(plan))
    assert read_plan_file(tmp_path / "p.toml")[1] == plan


@pytest.mark.parametrize(("fields", "fragment"), [
    ({"stage_tp": (2,)}, "stage_tp has 1 entries; it must have one per pipeline stage (pp=2)"),
    ({"stage_tp": (2, 0)}, "stage_tp entry 0 must be an integer"),
    ({"stage_tp": (1, 2)}, "tp=2 must be the first stage's degree (stage_tp[0]=1)"),
])
def test_bad_entries_are_refused_where_they_enter(fields: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        Plan(tp=2, pp=2, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(("stage_tp", "fragment"), [
    ((8, 3), "stage 1 (stage_tp=3): tp=3 must divide num_heads=64"),  # Llama 3 70B: 64 heads, 8 KV heads
    ((8, 16), "stage 1 (stage_tp=16): tp=16 must divide num_kv_heads=8 (or be a multiple of it)"),
])
def test_each_stage_meets_the_tp_rules_at_its_own_degree(stage_tp: tuple[int, int], fragment: str) -> None:
    plan = Plan(tp=8, pp=2, global_batch=8, stage_tp=stage_tp)
    if stage_tp[1] == 16:  # 16 is a multiple of 8 KV heads, and divides 64 heads and the FFN: it stands
        Job.build(MODEL, CLUSTER, plan, ENGINE)
        return
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        Job.build(MODEL, CLUSTER, plan, ENGINE)


def test_the_gpu_count_is_refused_with_its_rule() -> None:
    plan = Plan(tp=8, pp=2, global_batch=8, stage_tp=(8, 4))
    with pytest.raises(ConfigError, match=r"dp\*cp\*sum\(stage_tp\)=1\*1\*12=12 must equal gpus=16"):
        Job.build(MODEL, CLUSTER, plan, ENGINE, num_gpus=16)
    with pytest.raises(ConfigError, match="tp_mode='2d' must be '1d'"):
        Job.build(MODEL, CLUSTER, Plan(tp=4, tp_mode="2d", pp=2, micro_batch=2, global_batch=8, stage_tp=(4, 4)), ENGINE)


def test_each_stage_holds_what_its_uniform_plan_holds_there() -> None:
    """Stage s of tp (8, 4, 2, 2) = stage s of the uniform plan of its degree (costed over all stages at once)."""
    degrees = (8, 4, 2, 2)
    mixed = stage_memories(Job.build(MODEL, CLUSTER, replace(PLAN, tp=8, stage_tp=degrees), ENGINE))
    for stage, tp in enumerate(degrees):
        alone = stage_memories(Job.build(MODEL, CLUSTER, replace(PLAN, tp=tp), ENGINE))[stage]
        assert mixed[stage] == pytest.approx(alone, rel=1e-12), (stage, tp)


def test_a_boundary_carries_the_activation_over_the_narrower_stage() -> None:
    """Sec. 4.1: each of ``min(a, b)`` rank pairs carries ``1/min(a, b)`` of the boundary activation, so a 4 -> 2
    boundary, either way round, hops as a uniform tp=2 pipeline does (32 MiB a pair), slower than tp=4 (16 MiB)."""
    def hops_s(plan: Plan) -> float:
        return predict(Job.build(MODEL, CLUSTER, plan, ENGINE), simulate=False).time.pp_p2p_s

    two = replace(PLAN, pp=2, dp_shard=1, sharding="none", global_batch=8)
    narrow = hops_s(replace(two, tp=2))
    assert hops_s(replace(two, stage_tp=(4, 2))) == pytest.approx(narrow, rel=1e-12)
    assert hops_s(replace(two, tp=2, stage_tp=(2, 4))) == pytest.approx(narrow, rel=1e-12)
    assert hops_s(replace(two, stage_tp=(4, 4))) < 0.6 * narrow  # half the bytes a pair


def test_the_search_moves_gpus_between_stages_within_the_scale_up_domain() -> None:
    """Llama 3 70B (64 heads, 8 KV heads, FFN 28672) at tp=4 on 8-GPU nodes: degrees 2, 4, 8 (6 does not divide 64
    heads); four stages keeping 16 GPUs a replica, each moving 8: one stage at 8, two at 2, one at 4, in order.
    At tp=8 nothing wider fits the node, so no pattern; on 72-GPU NVLink racks 405B (128 heads) may take 16."""
    from plait.search.stage_tp import degrees, tp_patterns

    assert degrees(MODEL, CLUSTER, replace(PLAN, pp=4)) == (2, 4, 8)
    assert tp_patterns(MODEL, CLUSTER, replace(PLAN, pp=4)) == [(2, 2, 4, 8), (2, 2, 8, 4), (2, 4, 2, 8), (2, 4, 8, 2)]
    assert tp_patterns(MODEL, CLUSTER, replace(PLAN, tp=8, pp=4)) == []
    big = Plan(tp=8, sp=True, pp=16, global_batch=64, seq_len=8192)
    assert degrees(resolve_model("llama3.1-405b"), get_cluster("gb200-nvl72"), big) == (4, 8, 16)


@pytest.mark.parametrize(("fields", "fragment"), [
    ({"dp_shard": 2, "sharding": "zero3", "global_batch": 8}, "stage_tp=[2, 1] with dp=2: plait's stage-TP loop"),
    ({"sp": True}, "stage_tp=[2, 1] with sp=true"),
])
def test_plait_run_refuses_what_its_stage_tp_loop_does_not_run(fields: dict[str, object], fragment: str) -> None:
    pytest.importorskip("torch")
    from plait.run.support import check_runnable

    tiny = resolve_model(str(Path(__file__).parents[1] / "examples" / "tiny-model.toml"))
    plan = Plan(**{"tp": 2, "pp": 2, "global_batch": 4, "stage_tp": (2, 1), **fields})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=fragment.replace("[", r"\[")):
        check_runnable(plan, tiny, on_gpu=False)
    check_runnable(replace(plan, stage_tp=(2, 2)), tiny, on_gpu=False)  # equal degrees: the uniform runtime's


def test_a_plan_files_gpus_fill_dp_over_the_stages_degrees() -> None:
    """6 GPUs over stages of degrees 2 and 1: a replica takes 2 + 1 = 3, so dp = 2 (not 6 / (tp*pp) = 1.5)."""
    from plait.plan.defaults import complete_plan

    assert complete_plan({"pp": 2, "tp": 2, "stage_tp": [2, 1]}, 6, "x").dp == 2
    with pytest.raises(ConfigError, match=r"gpus=4 must be divisible by sum\(stage_tp\)\*cp=3\*1=3"):
        complete_plan({"pp": 2, "tp": 2, "stage_tp": [2, 1]}, 4, "x")


def test_stage_cells_kept_across_plans_cost_what_fresh_ones_do() -> None:
    """The pass keeps each stage cell (a uniform plan at a layer count) for all its programs: tables built after
    another plan's (at another TP degree and micro-batch), and again from the kept cells alone (the plan's own
    sharding only, as the TP patterns ask), equal those built with nothing kept."""
    import numpy as np

    from plait.search.stage_program import stage_choices, stage_tables

    limit = CLUSTER.accelerator.memory_bytes * 0.9
    kept: dict[object, object] = {}
    for plan, vary in ((PLAN, True), (replace(PLAN, tp=8, micro_batch=2), True), (PLAN, False)):
        choices = stage_choices(MODEL, CLUSTER, ENGINE, plan, vary_sharding=vary)
        args = (MODEL, CLUSTER, ENGINE, plan, [19, 20, 21], choices, limit, True)
        for shared, fresh in zip(stage_tables(*args, kept), stage_tables(*args)):
            assert np.array_equal(shared, fresh)
