"""Asynchronous plans end to end: their steps multipliers at any replica count (the asynchronous-SGD bound scaling
the measured two-replica figures), `plait run` starting their server ranks and training, and the planner keeping
them."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from plait.cost.sync import payload_bytes
from plait.errors import ConfigError
from plait.plan.async_convergence import replica_scale, staleness_factor
from plait.plan.convergence import convergence, table
from plait.sync import parse
from plait.workload.catalog import resolve_model
from plait.workload.tensors import parameter_shapes

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "examples" / "tiny-model.toml"
PLANS = {"async_ps": "async_ps:staleness=4", "easgd": "easgd:alpha=0.45,every=2",
         "cpu_servers": "param_server:servers=2,host=cpu"}


def test_the_step_bound_by_hand() -> None:
    """Lian et al. 2015's constant-step condition u + 2 T^2 u^2 <= 1: at T = 0 the synchronous step (u = 1, one
    replica); at N = 2, T = 1, u = 1/2 per update, twice the updates: the same per sample; N = 4, T = 3:
    u = 2 / (1 + sqrt(73)); the limit sqrt(2)."""
    assert staleness_factor(1, 0) == 1.0
    assert staleness_factor(2, 1) == 1.0
    assert staleness_factor(4, 3) == pytest.approx((1 + math.sqrt(73)) / 8)
    u = 2 / (1 + math.sqrt(73))
    assert u + 2 * 9 * u * u == pytest.approx(1.0)
    assert staleness_factor(10**6, 10**6 - 1) == pytest.approx(math.sqrt(2), rel=1e-5)
    with pytest.raises(ValueError, match="replicas=0"):
        staleness_factor(0, 0)


@pytest.mark.parametrize("replicas", [3, 4, 8, 64, 4096])
def test_async_ps_multipliers_grow_with_replicas_within_the_bound(replicas: int) -> None:
    """Known at every replica count: above the measured two-replica figures' mean, below sqrt(2) times it, and
    growing with the replicas; the measured figure itself is kept at two."""
    measured = [e.figure.multiplier for spec, entries in table().items() if spec.startswith("async_ps")
                for e in entries]
    anchor = sum(measured) / len(measured)  # type: ignore[arg-type]
    figure = convergence(parse("async_ps:staleness=8"), replicas)
    assert figure.known and figure.basis == "derived" and "Lian" in figure.source
    assert anchor < figure.factor < math.sqrt(2) * anchor
    assert figure.factor < convergence(parse("async_ps:staleness=8"), 2 * replicas).factor
    assert convergence(parse("async_ps:staleness=100"), 2).basis == "measured"
    assert convergence(parse("async_ps:staleness=100"), 1).factor == 1.0  # one worker: sequential SGD


def test_easgd_scales_at_the_measured_elastic_rate_only() -> None:
    """EASGD at p replicas scales its two-replica figure where p alpha matches (Zhang et al.'s beta = 0.9); the
    same alpha at more replicas, whose centre would overshoot every worker, has no figure and says which alpha."""
    at_four = convergence(parse("easgd:alpha=0.225,every=4"), 4)
    assert at_four.known and at_four.factor == pytest.approx(1.491 * replica_scale(4))
    too_strong = convergence(parse("easgd:alpha=0.45,every=4"), 4)
    assert not too_strong.known and "alpha=0.225" in too_strong.source
    assert not convergence(parse("easgd:alpha=0.225,every=7"), 4).known


def _plan(tmp_path: Path, spec: str) -> Path:
    plan = tmp_path / "plan.toml"
    plan.write_text(f'[job]\nmodel = "{MODEL}"\n[plan]\ndp_replicate = 2\nglobal_batch = 8\nmicro_batch = 4\n'
                    f'dp_sync = "{spec}"\n')
    return plan


@pytest.mark.slow
@pytest.mark.parametrize("method", PLANS)
def test_plait_run_starts_the_server_ranks_and_trains(tmp_path: Path, method: str) -> None:
    """`plait run --plan` of an async_ps and an EASGD plan (and of parameter servers on CPU server ranks) starts 2
    workers and the server ranks, trains 4 steps with finite losses, and worker 0 sends the cost model's bytes in
    every step."""
    pytest.importorskip("torch")
    spec, metrics = PLANS[method], tmp_path / "m.jsonl"
    done = subprocess.run([sys.executable, "-m", "plait", "run", "--plan", str(_plan(tmp_path, spec)), "--steps", "4",
                           "--metrics", str(metrics)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"2 workers and {parse(spec).server_ranks} server rank" in done.stdout
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert all(math.isfinite(r["loss"]) and r["step_time_s"] > 0 for r in rows)
    named = parameter_shapes(resolve_model(str(MODEL)))
    assert [r["sync_bytes"] for r in rows] == [payload_bytes(parse(spec), named, step) for step in range(4)]


def test_a_dry_run_says_the_launch_and_other_nodes_are_refused(tmp_path: Path) -> None:
    """The dry run names the asynchronous runtime on workers plus server ranks; several nodes are refused in one
    line before anything starts."""
    from plait.run.plan_run import PlanRun, run_plan
    from plait.run.worker_config import WorkerConfig

    said: list[str] = []
    plan = _plan(tmp_path, "async_ps:staleness=4,servers=2")
    outcome = run_plan(PlanRun(config=WorkerConfig(plan=plan, dry_run=True)), said.append)
    assert outcome.exit_code == 0 and "--nproc-per-node=4" in said[-1] and "plait.run.async_train" in said[-1]
    slowed = run_plan(PlanRun(config=WorkerConfig(plan=plan, dry_run=True, slowdown=(1.0, 3.0))), said.append)
    assert slowed.exit_code == 0 and said[-1].endswith("--slowdown 1,3")
    with pytest.raises(ConfigError, match="--nodes=2"):
        run_plan(PlanRun(config=WorkerConfig(plan=plan), nodes=2), said.append)


def _mixed_estimate(cluster, spec: str, gpus: tuple[int, int]):  # type: ignore[no-untyped-def]
    from plait.engine.catalog import get_engine
    from plait.plan.mixed import GroupShare, MixedPlan
    from plait.plan.plan import Plan
    from plait.predict.mixed import estimate_mixed
    from plait.workload.catalog import get_model

    model, n = get_model("gpt3-125m"), sum(gpus)
    plan = Plan(dp_replicate=n, micro_batch=2, global_batch=2 * n, seq_len=model.seq_len, dp_sync=spec)
    shares = tuple(GroupShare(group=g.name, num_gpus=k, batch=2 * k) for g, k in zip(cluster.groups, gpus,
                                                                                      strict=True))
    return estimate_mixed(model, cluster, MixedPlan(plan=plan, split="data", shares=shares), engine=get_engine()), plan


def test_two_groups_of_one_kind_step_as_the_homogeneous_asynchronous_plan() -> None:
    """A mixed cluster of one device type on its own fabric: the asynchronous step is the homogeneous estimate's."""
    from dataclasses import replace

    from plait.engine.catalog import get_engine
    from plait.hardware.catalog import get_cluster
    from plait.hardware.mixed import DeviceGroup, MixedCluster
    from plait.predict.estimate import estimate
    from plait.workload.catalog import get_model

    c = get_cluster("dgx-h100-ib")
    two = MixedCluster(name="two", groups=(DeviceGroup(name="x", cluster=c, num_gpus=8),
                                           DeviceGroup(name="y", cluster=c, num_gpus=8)),
                       join=replace(c.tiers[-1], span_gpus=16), source="test")
    est, plan = _mixed_estimate(two, "async_ps:staleness=1048576,servers=4", (8, 8))
    ref = estimate(get_model("gpt3-125m"), c, plan, engine=get_engine())
    assert est.step_time_s == pytest.approx(ref.step_time_s, rel=1e-12)
    assert est.steps_multiplier == ref.steps_multiplier and est.steps_multiplier_known


def test_asynchronous_workers_wait_for_nobody_on_a_mixed_cluster() -> None:
    """A100 + H100 at equal batches: the synchronous step is the A100 group's; asynchronous workers each step at
    their own group's pace, so a step of all replicas' iterations lands between the two groups' own (the harmonic
    mean of equal halves), with no idle time; a staleness bound holds the H100s to the A100s' pace over a long
    run."""
    from plait.hardware.mixed_catalog import get_mixed_cluster

    cluster = get_mixed_cluster("a100-h100-ib")
    est, _ = _mixed_estimate(cluster, "async_ps:staleness=1048576,servers=128", (64, 64))
    a100, h100 = (g.busy_s for g in est.groups)
    assert h100 < est.step_time_s < a100
    assert est.step_time_s == pytest.approx(2 / (1 / a100 + 1 / h100), rel=1e-12)
    assert all(g.idle_s == 0.0 for g in est.groups)
    bounded, _ = _mixed_estimate(cluster, "async_ps:staleness=4,servers=128", (64, 64))
    assert bounded.step_time_s == pytest.approx(max(g.busy_s for g in bounded.groups), rel=1e-12)  # held: Ho et al.


@pytest.mark.slow
def test_the_planners_rank_asynchronous_plans() -> None:
    """plait plan keeps asynchronous plans (a known multiplier at 16 replicas) on plait's engine, and the mixed
    planner ranks asynchronous splits on a mixed preset beside the synchronous ones. A global batch of 16 (one
    sequence per replica) keeps the asynchronous plans and their multiplier (1.69 at 16 replicas, as at the default
    128) while it leaves 2,004 feasible plans to list instead of 4,952: the asynchronous ones rank last, so the list
    must reach them, and each listed plan is costed again for its chunking (half the command's time)."""
    from tests.inprocess import cli

    code, out, err = cli(["plan", "--model", "gpt3-125m", "--cluster", "dgx-a100-ib", "--gpus", "16", "--engine",
                          "plait", "--global-batch", "16", "--top", "5000", "--json"])
    assert code == 0, err
    homo = json.loads(out)
    found = [p for p in homo["top"] if p["plan"]["dp_sync"].startswith("async_ps")]
    assert found and all(p["steps_multiplier"] > 1.244 for p in found)
    code, out, err = cli(["plan", "--model", "gpt3-1.3b", "--cluster", "a100-h100-ib", "--top", "200", "--json"])
    assert code == 0, err
    mixed = json.loads(out)
    ranked = [p for p in mixed["plans"] if p["plan"]["dp_sync"].startswith(("async_ps", "easgd"))]
    assert ranked and all(p["steps_multiplier_known"] for p in ranked)


@pytest.mark.slow
def test_cpu_workers_join_gpus_asynchronously_where_a_synchronous_step_waits_for_them() -> None:
    """Eight H100 and this machine's two CPU ranks (examples/mixed-gpu-cpu.toml): every synchronous mixed split
    steps at the CPUs' pace, so the best mixed plan is asynchronous (Hogbatch, 001-20: the H100s wait for nobody),
    ahead of every synchronous mixed plan even after its steps multiplier; the H100s alone still beat it."""
    from plait.engine.catalog import get_engine
    from plait.hardware.mixed_catalog import resolve_any_cluster
    from plait.search.mixed import plan_mixed
    from plait.workload.catalog import get_model

    cluster = resolve_any_cluster(str(ROOT / "examples" / "mixed-gpu-cpu.toml"))
    result = plan_mixed(get_model("gpt3-125m"), cluster, 80, local_sgd=False, engine=get_engine())  # type: ignore[arg-type]
    best = result.plans[0]
    synchronous = [e for e in result.plans if not e.plan.plan.dp_sync.asynchronous]
    assert best.plan.plan.dp_sync.asynchronous and best.steps_multiplier > 1.5
    assert synchronous and best.target_tokens_per_s > 10 * synchronous[0].target_tokens_per_s
    assert result.best_baseline is not None and result.best_baseline[1].target_tokens_per_s > best.target_tokens_per_s
