"""The planner: verdict accounting, batch/scalar agreement, ranking, Pareto, and its CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.plan.io import read_plan_file
from plait.search.enumerate import enumerate_space
from plait.search.pareto import Point, choose, pareto_front
from plait.search.planner import check_objective
from plait.search.runner import run_search
from plait.search.space import default_space
from plait.workload.catalog import get_model

LLAMA8, H100 = get_model("llama3-8b"), get_cluster("dgx-h100-ib")


@pytest.fixture(scope="module")
def result():
    return run_search(LLAMA8, H100, default_space(LLAMA8, H100, 16, (64,)), engine=get_engine())


def test_every_candidate_gets_one_verdict(result) -> None:
    assert result.num_candidates > 10_000
    assert sum(result.reasons.values()) + result.num_feasible == result.num_candidates
    assert result.costed == result.num_feasible + result.reasons["does not fit in GPU memory (with the safety margin)"]


def test_ranking_is_sorted_and_fits(result) -> None:
    best = result.top(10)
    assert [e.tokens_per_s for e in best] == sorted((e.tokens_per_s for e in best), reverse=True)
    limit = H100.accelerator.memory_bytes * (1 - result.space.memory_margin)
    assert all(e.memory.total_bytes <= limit and e.num_gpus == 16 for e in best)


def test_pareto_front_by_hand() -> None:
    est = None  # the front only compares numbers
    points = [Point(8, est, 100.0, 1000.0), Point(16, est, 60.0, 1200.0), Point(32, est, 70.0, 2500.0),
              Point(64, est, 20.0, 3000.0)]
    assert [p.gpus for p in pareto_front(points)] == [8, 16, 64]  # 32 GPUs is slower and dearer than 16
    assert choose(points, "cost", deadline_days=65, budget_usd=None).gpus == 16
    assert choose(points, "time", deadline_days=None, budget_usd=2000).gpus == 16
    with pytest.raises(ConfigError, match="relax the deadline to 20.0 days"):
        choose(points, "cost", deadline_days=5, budget_usd=None)


def plait(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "plait", *args], capture_output=True, text=True, timeout=300)


def test_plan_cli_json_and_export(tmp_path) -> None:
    out = plait("plan", "--model", "llama3-8b", "--gpus", "16", "--global-batch", "64", "--json",
                "--export", str(tmp_path))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["candidates"] == doc["feasible"] + sum(doc["infeasible_by_reason"].values())
    assert doc["top"][0]["tokens_per_s"] >= doc["top"][-1]["tokens_per_s"] and doc["why"]
    assert doc["engine"] == "megatron-core@0.14"  # the stated default engine, and its own configuration
    assert {p.name for p in tmp_path.iterdir()} == {"plan.toml", "megatron.sh"}
    again = plait("plan", "--model", "llama3-8b", "--gpus", "16", "--global-batch", "64", "--export", str(tmp_path))
    assert again.returncode == 2 and "already exists" in again.stderr
    assert "searched" not in again.stdout  # refused before the search


@pytest.mark.parametrize(("engine", "files"), [("torchtitan", {"plan.toml", "torchtitan.sh"}),
                                               ("deepspeed", {"plan.toml", "deepspeed.json"}),
                                               ("plait", {"plan.toml"})])
def test_plan_exports_for_the_engine_it_ranked_for(engine: str, files: set[str], tmp_path) -> None:
    out = plait("plan", "--model", "llama3-8b", "--gpus", "16", "--global-batch", "64", "--engine", engine,
                "--json", "--export", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert {p.name for p in tmp_path.iterdir()} == files
    spec, plan = read_plan_file(tmp_path / "plan.toml")
    assert spec.engine.startswith(engine) and json.loads(out.stdout)["top"][0]["engine"] == spec.engine


def test_plan_file_from_planner_estimates_the_same(tmp_path) -> None:
    plait("plan", "--model", "llama3-8b", "--gpus", "16", "--global-batch", "64", "--export", str(tmp_path))
    estimated = json.loads(plait("estimate", "--plan", str(tmp_path / "plan.toml"), "--json").stdout)
    planned = json.loads(plait("plan", "--model", "llama3-8b", "--gpus", "16", "--global-batch", "64",
                               "--json").stdout)["top"][0]
    assert estimated["step_time_s"] == pytest.approx(planned["step_time_s"], rel=1e-9)


def test_infeasible_request_lists_nearest_changes() -> None:
    out = plait("plan", "--model", "llama3.1-405b", "--cluster", "dgx-a100-ib", "--gpus", "8", "--global-batch", "8")
    assert out.returncode == 1
    assert "no plan fits" in out.stdout and "double the GPUs to 16" in out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("args,fragment", [
    (["plan", "--objective", "speed"], "objective='speed' must be one of throughput, cost, time"),
    (["plan", "--objective", "cost"], "needs --gpus-range"),
    (["plan", "--objective", "cost", "--gpus-range", "64:32"], "must satisfy 0 < low <= high"),
    (["plan", "--objective", "cost", "--gpus-range", "8:32", "--deadline-days", "0.001"], "relax the deadline"),
    (["plan", "--global-batch", "abc"], "global batch 'abc' must be"),
])
def test_bad_requests_are_one_line(args: list[str], fragment: str) -> None:
    out = plait(*args)
    assert out.returncode == 2 and fragment in out.stderr and "Traceback" not in out.stderr


def test_cost_objective_across_gpu_counts() -> None:
    out = plait("plan", "--model", "llama3-8b", "--objective", "cost", "--gpus-range", "8:32", "--tokens", "1e11",
                "--global-batch", "128", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [p["gpus"] for p in doc["points"]] == [8, 16, 32]
    assert doc["choice"]["dollars"] == min(p["dollars"] for p in doc["points"])
    assert set(doc["pareto_gpus"]) <= {8, 16, 32}


@pytest.mark.slow
def test_a_pool_of_workers_finds_what_one_process_finds() -> None:
    """The space cut into pieces for two worker processes: the same verdict counts, the same ranking (stable
    order included) and the same nearest misses as one process; progress counts up to the whole space."""
    model, cluster = get_model("llama3-70b"), get_cluster("dgx-h100-ib")
    space = default_space(model, cluster, 512, (1024,))
    serial = run_search(model, cluster, space, workers=1, engine=get_engine())
    seen: list[tuple[int, int]] = []
    pooled = run_search(model, cluster, space, workers=2, progress=lambda done, total: seen.append((done, total)),
                        engine=get_engine())
    assert serial.num_candidates == pooled.num_candidates > 100_000
    assert serial.reasons == pooled.reasons and serial.costed == pooled.costed
    assert [t for t, _, _ in serial.ranking()] == [t for t, _, _ in pooled.ranking()]
    assert [e.plan for e in serial.top(5)] == [e.plan for e in pooled.top(5)]
    assert [e.plan for e in serial.nearest_misses(3)] == [e.plan for e in pooled.nearest_misses(3)]
    assert seen[-1] == (pooled.num_candidates, pooled.num_candidates) and len(seen) > 2


def test_pieces_cover_the_space_in_order() -> None:
    from plait.search.parts import split

    model, cluster = get_model("llama3.1-405b"), get_cluster("dgx-h100-ib")
    space = default_space(model, cluster, 4096, (2048,))
    whole = enumerate_space(model, space)
    pieces = [enumerate_space(model, piece) for piece in split(model, space, 8)]
    assert len(pieces) >= 8
    for name in ("tp", "pp", "cp", "micro_batch", "recompute", "sharding"):
        assert np.array_equal(np.concatenate([p[name] for p in pieces]), whole[name]), name


def test_workers_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="workers=0 must be >= 1"):
        run_search(LLAMA8, H100, default_space(LLAMA8, H100, 8, (8,)), workers=0, engine=get_engine())


def test_parameter_servers_are_tried_alone_and_hybrid_where_replicas_hold_whole_layers() -> None:
    """With param_servers, every layout of dp > 1 replicas tries a server per replica; Poseidon's hybrid sends
    whole linear layers' factors, so only layouts without TP and PP try it (the plan rules refuse the others)."""
    from plait.sync import ParamServer

    model = get_model("llama3-8b")
    space = default_space(model, get_cluster("dgx-h100-ib"), 16, (64,), param_servers=True)
    cols = enumerate_space(model, space)
    syncs = [cols.methods[c] for c in cols["dp_sync"]]
    hybrid = np.array([isinstance(s, ParamServer) and s.hybrid for s in syncs])
    plain = np.array([isinstance(s, ParamServer) and not s.hybrid for s in syncs])
    whole = (cols["tp"] == 1) & (cols["pp"] == 1)
    assert hybrid.any() and plain.any()
    assert not (hybrid & ~whole).any()
    for sync in (s for s, h in zip(syncs, hybrid) if h):
        assert sync.servers == 16  # one per replica of a pure data-parallel layout


@pytest.mark.parametrize("limits, named", [
    (["--deadline-days", "60"], "--deadline-days applies to --objective cost, time or energy"),
    (["--budget-usd", "1e6"], "--budget-usd applies to --objective cost, time or energy"),
    (["--deadline-days", "60", "--budget-usd", "1e6"], "--deadline-days and --budget-usd apply to --objective cost"),
])
def test_a_limit_the_throughput_objective_would_ignore_is_refused(limits: list[str], named: str) -> None:
    from inprocess import cli

    code, out, err = cli(["plan", *limits])  # the default objective ranks by step time alone
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and named in err, err
    check_objective("cost", 60.0, 1e6)  # the objectives that read them take them
    check_objective("time", 60.0, None)
