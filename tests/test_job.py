"""The Job: built and checked once, the engine's cost facts from it, one estimate assembly."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.job import Job
from plait.plan.plan import Plan
from plait.predict.estimate import predict
from plait.search.runner import run_search
from plait.search.space import default_space
from plait.workload.catalog import get_model

SRC = Path(__file__).parent.parent / "src" / "plait"
MODEL, CLUSTER = get_model("llama3-8b"), get_cluster("dgx-h100-ib")


def test_build_fills_the_sequence_length_and_checks_the_plan_once() -> None:
    job = Job.build(MODEL, CLUSTER, Plan(dp_shard=8, sharding="zero3", global_batch=64), get_engine())
    assert job.plan.seq_len == MODEL.seq_len and job.framework is job.engine.framework
    assert Job.build(MODEL, CLUSTER, replace(job.plan, seq_len=1024), get_engine()).plan.seq_len == 1024
    with pytest.raises(ConfigError, match="tp=3"):
        Job.build(MODEL, CLUSTER, Plan(tp=3, global_batch=64), get_engine())
    # the rules answer before the Job exists: a negative length is a user's one-line error (found by the CLI fuzz)
    with pytest.raises(ConfigError, match="seq_len=-1 must be > 0"):
        Job.build(MODEL, CLUSTER, Plan(seq_len=-1, global_batch=64), get_engine())
    with pytest.raises(ConfigError, match="must equal gpus=16"):
        Job.build(MODEL, CLUSTER, job.plan, get_engine(), num_gpus=16)


def test_a_job_never_holds_a_plan_without_its_sequence_length() -> None:
    with pytest.raises(AssertionError, match="sequence length"):
        Job(model=MODEL, cluster=CLUSTER, plan=Plan(global_batch=64), engine=get_engine())


def test_the_planners_top_plans_are_the_estimates_predict_gives_with_every_pipeline_simulated() -> None:
    """One assembly, one refinement rule: a top plan of the search is what ``predict(simulate=True)`` says of it."""
    model = get_model("llama3-70b")
    result = run_search(model, CLUSTER, default_space(model, CLUSTER, 64, (256,)), workers=1, engine=get_engine())
    for est in result.top(3):
        alone = predict(Job.build(model, CLUSTER, est.plan, result.engine), simulate=True)
        assert alone.time == est.time and alone.step_time_interval_s == est.step_time_interval_s


def _functions(path: Path) -> list[ast.FunctionDef]:
    return [n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.FunctionDef)]


def test_no_function_defaults_the_engines_cost_facts() -> None:
    """Engine facts come from the job."""
    defaulted = []
    for path in SRC.rglob("*.py"):
        for fn in _functions(path):
            args = fn.args
            named = list(zip(args.args[len(args.args) - len(args.defaults):], args.defaults))
            named += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            if any(a.arg == "framework" for a, _ in named):
                defaulted.append(f"{path.relative_to(SRC)}:{fn.name}")
    assert not defaulted


def test_the_cost_layer_does_not_import_predict() -> None:
    found = [f"{path.relative_to(SRC)}: {node.module}" for path in (SRC / "cost").rglob("*.py")
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("plait.predict")]
    assert not found
