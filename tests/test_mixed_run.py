"""Mixed plans run from the plan itself: ``plait plan --cluster <mixed> --gpus N --export DIR`` writes a plan file
whose shares ``plait run`` turns into the runtime's uneven options, every plan the mixed planner ranks is one the
runtime runs, and per-rank local steps average in the same rounds on every rank."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.mixed import sliced
from plait.hardware.mixed_catalog import get_mixed_cluster, mixed_cluster_names
from plait.plan.io import JobSpec, plan_to_toml, read_plan_file, read_plan_parts
from plait.plan.mixed import GroupShare, MixedPlan, run_refusal
from plait.plan.plan import Plan
from plait.run.mixed_run import uneven_of
from plait.run.uneven import Uneven, rank_steps
from plait.search.mixed import ENGINE, plan_mixed
from plait.sync import LocalSGD
from plait.workload.catalog import resolve_model
from tests.inprocess import cli

ROOT = Path(__file__).parents[1]
TINY = ROOT / "examples" / "tiny-model.toml"


def test_a_slice_takes_each_group_in_proportion() -> None:
    whole = get_mixed_cluster("a100-h100-ib")  # 64 + 64
    assert [g.num_gpus for g in sliced(whole, 2).groups] == [1, 1]
    assert [g.num_gpus for g in sliced(whole, 3).groups] == [2, 1]
    assert [g.num_gpus for g in sliced(whole, 16).groups] == [8, 8]
    two = sliced(whole, 2)
    assert [g.cluster.accelerator.name for g in two.groups] == [g.cluster.accelerator.name for g in whole.groups]
    assert two.join == whole.join and sliced(whole, 128) is whole
    for bad in (1, 129):
        with pytest.raises(ConfigError, match="at least one device per group"):
            sliced(whole, bad)


def test_a_mixed_plan_file_reads_back_exactly(tmp_path: Path) -> None:
    plan = Plan(dp_replicate=2, micro_batch=4, global_batch=16, dp_sync=LocalSGD(every=4))
    mixed = MixedPlan(plan=plan, split="data", shares=(GroupShare(group="a100", num_gpus=1, batch=8, local_steps=4),
                                                       GroupShare(group="h100", num_gpus=1, batch=8, local_steps=16)))
    path = tmp_path / "plan.toml"
    path.write_text(plan_to_toml(plan, JobSpec(cluster="a100-h100-ib", gpus=2), mixed))
    job, read_plan, read_mixed = read_plan_parts(path)
    assert read_plan == plan and read_mixed == mixed and job.gpus == 2
    with pytest.raises(ConfigError, match=r"\[mixed\] shares the plan over device groups; `plait run"):
        read_plan_file(path)


def test_shares_become_each_ranks_options() -> None:
    """Ranks fill the shares in order: a data split's unequal batches and local steps per replica, a pipeline
    split's layers per stage, and each group's speed factor on each of its ranks."""
    plan = Plan(dp_replicate=4, micro_batch=2, global_batch=16, dp_sync=LocalSGD(every=4))
    data = MixedPlan(plan=plan, split="data", shares=(GroupShare(group="a", num_gpus=1, batch=4, local_steps=4),
                                                      GroupShare(group="b", num_gpus=3, batch=12, local_steps=16)))
    assert uneven_of(data, {"a": 2.5, "b": 1.0}) == Uneven(slowdown=(2.5, 1.0, 1.0, 1.0), local_steps=(4, 16, 16, 16))
    uneven = MixedPlan(plan=Plan(dp_replicate=2, micro_batch=2, global_batch=16), split="data",
                       shares=(GroupShare(group="a", num_gpus=1, batch=4), GroupShare(group="b", num_gpus=1, batch=12)))
    assert uneven_of(uneven, {"a": 3.0, "b": 1.0}) == Uneven(slowdown=(3.0, 1.0), batch_split=(4, 12))
    pipe = MixedPlan(plan=Plan(pp=2, micro_batch=2, global_batch=16), split="pipeline",
                     shares=(GroupShare(group="a", num_gpus=1, layers=(1,)), GroupShare(group="b", num_gpus=1, layers=(3,))))
    assert uneven_of(pipe, {"a": 1.0, "b": 1.0}) == Uneven(stage_layers=(1, 3))
    assert [rank_steps(8, 4, (4, 16), r) for r in (0, 1)] == [8, 32]  # two rounds on each rank


def test_unequal_batches_need_a_layout_the_runtime_splits() -> None:
    shares = (GroupShare(group="a", num_gpus=2, batch=4), GroupShare(group="b", num_gpus=2, batch=12))
    tp = MixedPlan(plan=Plan(tp=2, dp_replicate=2, micro_batch=2, global_batch=16), split="data", shares=shares)
    assert "unequal batches per replica with tp=2" in (run_refusal(tp) or "")
    even = MixedPlan(plan=tp.plan, split="data", shares=tuple(GroupShare(group=s.group, num_gpus=2, batch=8)
                                                              for s in shares))
    assert run_refusal(even) is None


@pytest.mark.parametrize("preset", mixed_cluster_names())
def test_the_planner_ranks_only_what_plait_run_runs(preset: str) -> None:
    """Every preset at 16 devices with a small model: every ranked plan is one ``plait run`` executes from its plan
    file (no refusal, and the plait engine's capability table accepts its layout)."""
    from plait.engine.capability import first_unsupported

    model = resolve_model(str(ROOT / "examples" / "small-model.toml"))
    result = plan_mixed(model, sliced(get_mixed_cluster(preset), 16), 64, engine=get_engine(ENGINE))
    assert result.plans
    for est in result.plans:
        assert run_refusal(est.plan) is None, est.plan.describe()
        assert first_unsupported(est.plan.plan, model, get_engine("plait"), "cpu") is None, est.plan.describe()


def test_plait_run_refuses_uneven_options_beside_a_mixed_plan(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    def no_launch(*_: object, **__: object) -> int:
        raise AssertionError("a rank was started")

    monkeypatch.setattr("plait.run.plan_run.run_local", no_launch)
    code, _, err = cli(["plan", "--cluster", "a100-h100-ib", "--gpus", "2", "--model", str(TINY), "--global-batch",
                        "16", "--export", str(tmp_path)])
    assert code == 0, err
    code, _, err = cli(["run", "--plan", str(tmp_path / "plan.toml"), "--slowdown", "1,2"])
    assert code == 2 and "--slowdown: " in err and "is a mixed plan" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_plan_export_then_run_on_a_mixed_preset(tmp_path: Path) -> None:
    """The tiny model on 2 devices of a100-h100-ib: the planner's best mixed plan, exported, trains on 2 gloo
    ranks with its shares and prints its emulation and its prediction."""
    code, out, err = cli(["plan", "--cluster", "a100-h100-ib", "--gpus", "2", "--model", str(TINY), "--global-batch",
                          "16", "--export", str(tmp_path), "--json"])
    assert code == 0, err
    exported = json.loads(out)
    assert exported["exported"] == [str(tmp_path / "plan.toml")]
    job, plan, mixed = read_plan_parts(tmp_path / "plan.toml")
    assert mixed is not None and mixed.describe() == exported["plans"][0]["layout"]
    assert job.cluster == "a100-h100-ib" and job.gpus == 2 == plan.num_gpus
    metrics = tmp_path / "metrics.jsonl"
    code, out, err = cli(["run", "--plan", str(tmp_path / "plan.toml"), "--steps", "2", "--metrics", str(metrics)])
    assert code == 0, err
    assert "emulating 2 devices of" in err + out and "a100" in err + out
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all(r["loss"] > 0 for r in rows)


@pytest.mark.slow
def test_per_rank_local_steps_average_in_the_same_rounds(tmp_path: Path) -> None:
    """local_sgd every 4, rank 0 taking 8 local steps a round and rank 1 (3x slower) 4, over 8 steps (2 rounds): rank 0
    trains 16 steps and sends its parameters exactly at the first step of each round (PeriodicModelAverager
    averages after steps 0, H, 2H, ...), so both ranks' collectives pair up and the run ends."""
    from tests.ranks import run_ranks

    plan, metrics = tmp_path / "plan.toml", tmp_path / "m.jsonl"
    plan.write_text(f'[job]\nmodel = "{TINY}"\n[plan]\ndp_replicate = 2\nglobal_batch = 16\nmicro_batch = 4\n'
                    'dp_sync = "local_sgd:every=4"\n')
    out = run_ranks(2, ["-m", "plait.run.worker", "--plan", str(plan), "--full-precision", "--steps", "8",
                        "--metrics", str(metrics), "--local-steps", "8,4", "--slowdown", "1,3"], timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert len(rows) == 16
    sent = [r["step"] for r in rows if r["sync_bytes"]]
    assert sent == [1, 9]


def test_a_layout_whose_ranks_cannot_be_slowed_runs_its_shares_at_one_speed() -> None:
    """tp=2 stages over A100 and H100: the sleep would stretch the tensor-parallel collectives, so the run keeps
    the shares (3 + 1 layers) without a slowdown and its one line says why."""
    from plait.run.mixed_run import resolve_mixed_run

    model = resolve_model(str(ROOT / "examples" / "small-model.toml"))
    plan = Plan(tp=2, pp=2, micro_batch=2, global_batch=16, seq_len=model.seq_len)
    run = resolve_mixed_run(JobSpec(cluster="v100-a100-ib"), MixedPlan(plan=plan, split="pipeline", shares=(
        GroupShare(group="v100", num_gpus=2, layers=(1,)), GroupShare(group="a100", num_gpus=2, layers=(3,)))),
        model, get_engine("plait"))
    assert run.factors["v100"] > 1.0 == run.factors["a100"]
    assert run.uneven == Uneven(stage_layers=(1, 3)) and "tp=2" in (run.unslowed or "")
    assert "at one speed" in run.note() and "tp=2" in run.note()
