"""The runtime: every layout trains with the single-process losses (fp32, gloo, spawned ranks).

Each case runs ``plait.run.worker`` under torchrun for 10 steps of examples/tiny-model.toml and
compares every step's loss with a one-process run within 1e-5 relative.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ranks import run_ranks

pytest.importorskip("torch")

ROOT = Path(__file__).parents[1]
MODEL = ROOT / "examples" / "tiny-model.toml"
STEPS = 10
CASES = {
    "ddp": (2, "dp_replicate = 2"),
    "zero1": (2, 'dp_shard = 2\nsharding = "zero1"'),
    "fsdp-zero2": (2, 'dp_shard = 2\nsharding = "zero2"'),
    "fsdp-zero3": (2, 'dp_shard = 2\nsharding = "zero3"'),
    "tp2-sp": (2, "tp = 2\nsp = true"),
    "pp2-gpipe": (2, 'pp = 2\nschedule = "gpipe"'),
    "pp2-1f1b": (2, 'pp = 2\nschedule = "1f1b"'),
    "pp2-interleaved": (2, 'pp = 2\nvpp = 2\nschedule = "interleaved"'),
    "dp2xtp2": (4, 'tp = 2\nsp = true\ndp_shard = 2\nsharding = "zero3"'),
    "pp2xdp2": (4, 'pp = 2\ndp_shard = 2\nsharding = "zero2"'),
    "pp2xdp2-zero3": (4, 'pp = 2\ndp_shard = 2\nsharding = "zero3"'),  # stages stay gathered over the step
    "recompute-full": (2, 'dp_shard = 2\nsharding = "zero3"\nrecompute = "full"'),
    "recompute-partial": (2, 'dp_shard = 2\nsharding = "zero3"\nrecompute = "full"\nrecompute_layers = 2'),
    "recompute-selective": (2, 'dp_replicate = 2\nrecompute = "selective"'),
    "hsdp": (4, 'dp_replicate = 2\ndp_shard = 2\nsharding = "zero3"'),
    # per-stage: the first stage holds 3 layers and recomputes them, the second 1 and keeps its activations
    "pp2-per-stage": (2, 'pp = 2\nschedule = "1f1b"\nrecompute = "full"\nstage_recompute = ["full", "none"]\n'
                         'stage_layers = [3, 1]'),
    # per-stage sharding: the first stage's dp_shard ranks shard with FSDP2 (ZeRO-3), the second's keep DDP replicas
    # and shard only the optimizer (ZeRO-1)
    "pp2xdp2-stage-sharding": (4, 'pp = 2\ndp_shard = 2\nsharding = "zero3"\nstage_sharding = ["zero3", "zero1"]'),
    # per-stage TP degree: the first stage on a TP pair, the second on one rank (3 ranks; plait.run.stage_tp)
    "pp2-stage-tp": (3, 'pp = 2\ntp = 2\nsp = false\nstage_tp = [2, 1]'),
    # a mixed plan's groups at their own TP degree: the first group's stage on a TP pair with 3 layers, the second's
    # on one rank with 1 (the shares' layers reach plait.run.stage_tp through the plan)
    "mixed-group-tp": (3, 'pp = 2\ntp = 2\nsp = false\nstage_tp = [2, 1]\n[mixed]\nsplit = "pipeline"\n'
                          '[[mixed.shares]]\ngroup = "v100"\nnum_gpus = 2\nlayers = [3]\n'
                          '[[mixed.shares]]\ngroup = "a100"\nnum_gpus = 1\nlayers = [1]'),
}


def write_plan(path: Path, body: str) -> Path:
    path.write_text(f'[job]\nmodel = "{MODEL}"\n[plan]\nglobal_batch = 8\nmicro_batch = 2\n{body}\n')
    return path


def torchrun(nproc: int, plan: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_ranks(nproc, ["-m", "plait.run.worker", "--plan", str(plan), *extra])


def losses(nproc: int, plan: Path, metrics: Path, *extra: str) -> list[float]:
    out = torchrun(nproc, plan, "--full-precision", "--steps", str(STEPS), "--metrics", str(metrics), *extra)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line)["loss"] for line in metrics.read_text().splitlines()]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> list[float]:
    tmp = tmp_path_factory.mktemp("reference")
    return losses(1, write_plan(tmp / "plan.toml", ""), tmp / "m.jsonl")


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_layout_matches_single_process(name: str, reference: list[float], tmp_path: Path) -> None:
    nproc, body = CASES[name]
    got = losses(nproc, write_plan(tmp_path / "plan.toml", body), tmp_path / "m.jsonl")
    assert len(got) == STEPS
    assert got == pytest.approx(reference, rel=1e-5)
    assert got[-1] < got[0]  # it trains


def test_checkpoint_resume_continues_with_the_same_losses(tmp_path: Path) -> None:
    plan = write_plan(tmp_path / "plan.toml", 'dp_shard = 2\nsharding = "zero3"')
    full = losses(2, plan, tmp_path / "full.jsonl", "--checkpoint-dir", str(tmp_path / "ckpt"), "--checkpoint-at", "5")
    resumed = losses(2, plan, tmp_path / "resumed.jsonl", "--checkpoint-dir", str(tmp_path / "ckpt"), "--resume")
    assert resumed == full[5:]  # exactly the uninterrupted run's losses


def test_plan_this_machine_cannot_run_fails_before_training(tmp_path: Path) -> None:
    plan = write_plan(tmp_path / "plan.toml", "tp = 2\nsp = true\ntp_comm_overlap = true")
    out = subprocess.run([sys.executable, "-m", "plait", "run", "--plan", str(plan)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 2
    assert "async TP" in out.stderr and "Traceback" not in out.stderr
    assert "step 1" not in out.stderr + out.stdout


def test_dry_run_builds_mesh_and_stages(tmp_path: Path) -> None:
    plan = write_plan(tmp_path / "plan.toml", 'pp = 2\nvpp = 2\nschedule = "interleaved"')
    out = torchrun(2, plan, "--dry-run")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "dry run ok" in out.stdout and "stages per rank [0, 2]" in out.stdout


@pytest.mark.slow
def test_plait_run_prints_measured_and_predicted(tmp_path: Path) -> None:
    plan = write_plan(tmp_path / "plan.toml", "dp_replicate = 2")
    out = subprocess.run([sys.executable, "-m", "plait", "run", "--plan", str(plan), "--steps", "3"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "measured" in out.stdout and "predicted" in out.stdout and "peak memory" in out.stdout
    assert "note: predicted for" in out.stdout and "plait calibrate" in out.stdout  # a CPU run vs a GPU preset


def test_profiler_trace_of_a_real_step(tmp_path: Path) -> None:
    """A measured step in the same trace-event format as `plait simulate --trace`."""
    plan = write_plan(tmp_path / "plan.toml", "dp_replicate = 2")
    out = torchrun(2, plan, "--steps", "2", "--trace-dir", str(tmp_path / "traces"))
    assert out.returncode == 0, out.stderr[-2000:]
    for rank in (0, 1):
        doc = json.loads((tmp_path / "traces" / f"rank{rank}.json").read_text())
        complete = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
        assert complete and all({"name", "ts", "dur", "pid", "tid"} <= set(e) for e in complete)


@pytest.mark.slow
def test_calibrate_writes_a_description_the_estimator_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`plait calibrate` measures this machine (gloo, 2 ranks) into a cluster file with a curve per collective
    (``--quick``: the same figures from fewer rounds; the full run differs only in counts); its stages show on a
    terminal only, so a pipe hears nothing but the result. Run in this process (its ranks are spawned as the
    command spawns them), the compute ranks timing only the smallest matmul and sequence, whose figure stands for
    every size: no assertion here reads the compute curves' shapes, and it saves ~10 s of a ~50 s test."""
    import torch

    from plait.engine.catalog import get_engine
    from plait.hardware.catalog import load_cluster_file
    from plait.plan.plan import Plan
    from plait.predict.estimate import estimate
    from plait.run import calibrate
    from plait.workload.catalog import resolve_model
    from tests.inprocess import cli

    measure = calibrate.compute_figures

    def smallest_only(ranks, threads, sizes, seqs, half, say):  # type: ignore[no-untyped-def]
        figures = measure(ranks, threads, sizes[:1], seqs[:1], half, say)  # one timed point stands for each size
        return {**figures, **{k: figures[k] * len(sizes) for k in ("fp32", "bf16", "wgrad")},
                "attention": figures["attention"] * len(seqs)}

    monkeypatch.setattr(calibrate, "compute_figures", smallest_only)
    threads = torch.get_num_threads()  # describe_machine sets this process's threads as a rank's
    out = tmp_path / "calibrated.toml"
    try:
        code, _, err = cli(["calibrate", "--output", str(out), "--quick"])
    finally:
        torch.set_num_threads(threads)
    assert code == 0, err[-2000:]
    assert "measuring" not in err  # the stages' progress is for a terminal
    cluster = load_cluster_file(out)
    tier = cluster.tiers[0]
    assert cluster.collective_backend == "gloo"  # the library timed: no NCCL protocol on its collectives
    assert tier.all_gather_efficiency is not None and tier.reduce_scatter_efficiency is not None
    for curve in (tier.efficiency, tier.all_gather_efficiency, tier.reduce_scatter_efficiency):
        assert curve.source.startswith("measured by plait calibrate") and all(0 < f <= 1 for f in curve.fractions)
    assert cluster.accelerator.peak_tflops["bf16"] > 0
    eff = cluster.accelerator.efficiency
    for host in (eff.host_fsdp_layer_fwd_us, eff.host_fsdp_layer_bwd_us, eff.host_tp_layer_fwd_us, eff.host_tp_layer_bwd_us):
        assert host.source.startswith("measured by plait calibrate") and host.value >= 0
    # the host's time per kernel, and a CPU's ops run in their calls (no launch queue: the streams add)
    assert eff.host_launch_us.source.startswith("measured by plait calibrate") and eff.host_launch_us.value > 0
    assert cluster.accelerator.asynchronous_launch is False
    est = estimate(resolve_model(str(ROOT / "examples" / "small-model.toml")), cluster,
                   Plan(dp_shard=2, sharding="zero3", global_batch=16, micro_batch=4), engine=get_engine())
    assert est.step_time_s > 0 and est.time.fsdp_comm_s > 0
    code, _, err = cli(["calibrate", "--output", str(out)])
    assert code == 2 and "--force" in err  # an existing file is never replaced silently
