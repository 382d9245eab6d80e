"""Measured vs predicted on this machine, and the runtime's overhead over a plain PyTorch loop.

Run: python benchmarks/run_vs_predict.py
1. ``plait calibrate`` measures this machine into a temporary cluster file.
2. Several plans of examples/small-model.toml run through ``plait run`` (2 ranks, bf16 autocast);
   the median step time after the first step and the peak memory of rank 0 are printed next to
   ``plait estimate`` with the calibrated description (targets: |error| <= 20% time, 10% memory).
3. benchmarks/plain_ddp.py runs plait's own training step (``plait.run.worker.train_step`` on a model
   built by plait's runtime) and a hand-written DDP loop side by side in one torchrun job, alternating
   step by step; the overhead is the ratio of their median step times (target <= 3%).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

# a sibling script (run as python benchmarks/<name>.py)
from machine_load import load_average

from plait.engine.catalog import get_engine
from plait.hardware.catalog import load_cluster_file
from plait.plan.io import read_plan_file
from plait.predict.estimate import estimate
from plait.run.precision import cpu_runs_natively
from plait.workload.catalog import resolve_model

ROOT = Path(__file__).parents[1]
MODEL = ROOT / "examples" / "small-model.toml"
STEPS = 12
OVERHEAD_STEPS = 32
PLANS = {
    "ddp": "dp_replicate = 2\nglobal_batch = 16\nmicro_batch = 4",
    "fsdp-zero3": 'dp_shard = 2\nsharding = "zero3"\nglobal_batch = 16\nmicro_batch = 4',
    "tp2-sp": "tp = 2\nsp = true\nglobal_batch = 16\nmicro_batch = 4",
    "pp2-1f1b": 'pp = 2\nschedule = "1f1b"\nglobal_batch = 16\nmicro_batch = 4',
}


FULL_PRECISION = [] if cpu_runs_natively("bf16") else ["--full-precision"]
"""bf16 where this CPU would emulate it runs in fp32, as `plait run` does (plait.run.precision) and as `plait
calibrate` then measures the bf16 figures."""


def torchrun(args: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", *args],
                   check=True, capture_output=True)


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    cluster_file = tmp / "calibrated.toml"
    subprocess.run([sys.executable, "-m", "plait", "calibrate", "--output", str(cluster_file)], check=True,
                   capture_output=True)
    cluster = load_cluster_file(cluster_file)
    model = resolve_model(str(MODEL))
    eff, tier = cluster.accelerator.efficiency, cluster.tiers[0]
    host = {name: (getattr(eff, f"host{name}_layer_fwd_us").value, getattr(eff, f"host{name}_layer_bwd_us").value)
            for name in ("", "_fsdp", "_tp")}
    print(f"calibrated: collective step latency {tier.latency_us:.0f} us; host us per layer (fwd/bwd) "
          + ", ".join(f"{name.strip('_') or 'eager'} {f:.0f}/{b:.0f}" for name, (f, b) in host.items()))
    print(f"{'plan':12s} {'measured s':>11s} {'predicted s':>12s} {'error':>7s} {'measured GiB':>13s} "
          f"{'predicted GiB':>14s} {'error':>7s}")
    medians = {}
    for name, body in PLANS.items():
        plan_file = tmp / f"{name}.toml"
        plan_file.write_text(f'[job]\nmodel = "{MODEL}"\n[plan]\n{body}\n')
        metrics = tmp / f"{name}.jsonl"
        torchrun(["-m", "plait.run.worker", "--plan", str(plan_file), "--steps", str(STEPS), "--metrics", str(metrics),
                  *FULL_PRECISION])
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
        medians[name] = statistics.median(r["step_time_s"] for r in rows[1:])
        peak = max(r["peak_memory_bytes"] for r in rows) / 2**30
        _, plan = read_plan_file(plan_file)
        est = estimate(model, cluster, plan, engine=get_engine("plait"))
        pred_mem = est.memory.total_bytes / 2**30
        print(f"{name:12s} {medians[name]:11.4f} {est.step_time_s:12.4f} "
              f"{100 * (est.step_time_s / medians[name] - 1):+6.1f}% {peak:13.3f} {pred_mem:14.3f} "
              f"{100 * (pred_mem / peak - 1):+6.1f}%")
    side_by_side = tmp / "side-by-side.json"
    torchrun([str(ROOT / "benchmarks" / "plain_ddp.py"), str(MODEL), "16", "4", str(OVERHEAD_STEPS), str(side_by_side)])
    times = json.loads(side_by_side.read_text())
    ours, plain, ours_cpu, plain_cpu = (statistics.median(times[k][2:]) for k in ("plait", "plain", "plait_cpu",
                                                                                  "plain_cpu"))
    print(f"DDP step, {OVERHEAD_STEPS - 2} alternating steps in one run: plait's train_step {ours:.4f} s vs plain "
          f"PyTorch loop {plain:.4f} s (medians): overhead {100 * (ours / plain - 1):+.1f}% (target <= 3%); "
          f"rank 0's CPU {ours_cpu:.4f} vs {plain_cpu:.4f} s ({100 * (ours_cpu / plain_cpu - 1):+.1f}%); "
          f"load average {load_average()}")


if __name__ == "__main__":
    main()
