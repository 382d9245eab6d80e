"""A rank's run configuration (plait.run.config): the file the launcher writes is the configuration the rank reads,
the options a torchrun line carries read back the same, and a file that is not a configuration is refused."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from plait.errors import ConfigError
from plait.run.config import config_argv, read_config, write_config
from plait.run.worker_config import WorkerConfig
from plait.run.workload_configs import AsyncConfig, ConvergeConfig
from plait.workloads.gnn.config import GnnConfig, GnnLocalConfig, GnnPipeConfig

FULL = WorkerConfig(plan=Path("p.toml"), steps=7, keep=3, on_nonfinite="skip", slowdown=(1.0, 2.5), batch_split=(12, 4),
                    stage_layers=(3, 1), cluster="dgx-h100-ib", checkpoint_dir=Path("ckpt"), checkpoint_at=2,
                    checkpoint_every=3, trace_dir=Path("traces"), resume=True, reshard=True, full_precision=True,
                    dry_run=True, async_save=True, metrics=Path("m.jsonl"), lr=1e-3, seed=7)


@pytest.mark.parametrize("config", [WorkerConfig(plan=Path("p.toml")), FULL], ids=["defaults", "every field"])
def test_the_file_and_the_options_read_back_as_the_config(config: WorkerConfig, tmp_path: Path) -> None:
    path = write_config(config, tmp_path / "run.json")
    assert read_config(WorkerConfig, ["--config", str(path)]) == config
    assert read_config(WorkerConfig, config_argv(config)) == config


def test_the_options_keep_the_order_of_a_printed_torchrun_line() -> None:
    assert config_argv(replace(FULL, lr=3e-3, seed=1234, metrics=None)) == [
        "--plan", "p.toml", "--steps", "7", "--keep", "3", "--on-nonfinite", "skip", "--slowdown", "1,2.5",
        "--batch-split", "12,4", "--stage-layers", "3,1", "--cluster", "dgx-h100-ib", "--checkpoint-dir", "ckpt",
        "--checkpoint-at", "2", "--checkpoint-every", "3", "--trace-dir", "traces", "--resume", "--reshard",
        "--full-precision", "--dry-run", "--async-save"]


@pytest.mark.parametrize(("doc", "fragment"), [
    ({"plan": "p.toml", "stpes": 3}, "WorkerConfig: unknown key 'stpes'"),
    ({"steps": 3}, "missing required key 'plan'"),
    ({"plan": "p.toml", "steps": "3"}, "steps='3' must be an integer"),
    ({"plan": "p.toml", "steps": True}, "steps=True must be an integer"),
    ({"plan": "p.toml", "on_nonfinite": "ignore"}, "must be one of stop, skip"),
    ({"plan": None}, "plan=None must be a path"),
    ({"plan": "p.toml", "slowdown": ["x"]}, "slowdown[0]='x' must be a number"),
    (["p.toml"], "WorkerConfig must be a table"),
])
def test_a_file_that_is_not_a_config_is_refused(doc: object, fragment: str, tmp_path: Path) -> None:
    """The file is read through the strict schema (plait.schema.build): one line naming the key and the rule."""
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        read_config(WorkerConfig, ["--config", str(path)])
    assert fragment in str(error.value) and str(error.value).startswith("run config WorkerConfig")


def test_options_beside_a_config_file_and_bad_values_are_usage_errors(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = write_config(WorkerConfig(plan=Path("p.toml")), tmp_path / "run.json")
    for argv, fragment in ((["--config", str(path), "--steps", "3"], "--config takes no other option"),
                           (["--steps", "3"], "required: --plan"),
                           (["--plan", "p.toml", "--slowdown", "a"], "--slowdown='a' must be comma-separated floats"),
                           (["--plan", "p.toml", "--steps", "x"], "--steps='x' must be int")):
        with pytest.raises(SystemExit) as exit_:
            read_config(WorkerConfig, argv)
        assert exit_.value.code == 2 and fragment in capsys.readouterr().err


def test_the_workers_configs_read_their_options() -> None:
    gnn = read_config(GnnLocalConfig, ["--out", "o.json", "--fanouts", "4", "2", "--kind", "gat", "--strategy", "llcg"])
    assert (gnn.fanouts, gnn.kind, gnn.strategy, gnn.nodes) == ((4, 2), "gat", "llcg", 4000)
    assert read_config(GnnPipeConfig, ["--out", "o.json"]).nodes == 2000  # its own graph default
    converge = read_config(ConvergeConfig, ["--out", "o.json", "--model", "m", "allreduce@sgd", "topk:ratio=0.1@sgd"])
    assert converge.cases == ("allreduce@sgd", "topk:ratio=0.1@sgd")
    both = read_config(AsyncConfig, ["--out", "o", "--model", "m", "--spec", "async_ps", "--spec", "easgd", "--slow",
                                     "1:0.5"])
    assert both.spec == ("async_ps", "easgd") and both.slow_s == {1: 0.5}
    with pytest.raises(ConfigError, match="need --sampler matrix"):
        GnnConfig(out=Path("o"), bulk=2)
    assert json.loads(json.dumps({"fanouts": list(gnn.fanouts)}))["fanouts"] == [4, 2]


def test_run_plan_says_the_multi_node_line_each_node_runs() -> None:
    """The launcher is a plain function: several nodes get the torchrun line, the rank's options on it."""
    from plait.run.plan_run import PlanRun, run_plan

    plan = Path(__file__).resolve().parents[1] / "examples" / "tiny-plan.toml"
    said: list[str] = []
    config = WorkerConfig(plan=plan, steps=4, metrics=Path("m.jsonl"), batch_split=(6, 2))
    outcome = run_plan(PlanRun(config=config, nodes=2), said.append)
    assert outcome.exit_code == 0 and outcome.report is None and len(said) == 1
    assert said[0].startswith("torchrun --nnodes=2 --nproc-per-node=1 ")
    line = said[0].split()
    assert read_config(WorkerConfig, line[line.index("plait.run.worker") + 1:]) == replace(config, metrics=None)
