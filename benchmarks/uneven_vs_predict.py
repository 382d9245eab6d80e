"""Uneven work on ranks of unequal speed, measured vs predicted on this machine.

Run: python benchmarks/uneven_vs_predict.py [--cluster calibrated.toml]
1. ``plait calibrate`` measures this machine into a temporary cluster file (or ``--cluster`` reuses one).
2. examples/small-model.toml trains on 2 gloo ranks, rank 1 made 3 times slower at compute (``--slowdown 1,3``,
   :mod:`plait.run.slowdown`), in four layouts: DDP with the even batch split (8 + 8) and with the
   speed-proportional one (12 + 4, Poplar's allocation), and a 2-stage 1F1B pipeline with even layers (2 + 2) and
   with the fast rank's stage holding more (3 + 1); ZeRO-2 and ZeRO-3 with the speed-proportional split (FSDP2
   slowed block by block, :mod:`plait.run.slowdown`); and local SGD every 4 steps with per-rank local steps in
   proportion to speed (12 + 4 a round, 000-17). Measured: the median step time after the first step (local
   steps: the mean step of rank 0, which reports, over the rounds after the first).
3. Predicted: :func:`plait.predict.mixed.estimate_mixed` on a mixed cluster of two groups of one rank each, rank
   0 the calibrated description and rank 1 :func:`plait.hardware.mixed.slowed` of it by 3 (what the sleep
   emulates), joined by the calibrated collective tier — what ``plait run`` prints for the same options
   (:func:`plait.run.uneven_prediction.predict_uneven`). Target: |error| <= 20% for each layout.
Printed: each layout's measured and predicted step time and error, its error over the control's, the predicted busy
time of each group, the load average and the CPU time the run's processes took; and the speed-up of the uneven split
over the even one, measured and predicted. The first row, ``ddp x1``, is the control: DDP on equal ranks, whose
error is the calibration's alone (benchmarks/run_vs_predict.py's ``ddp``); on a machine other jobs load, the
calibration (both ranks computing at once) and the runs see different shares of the cores, and every row moves with
it: ``vs control`` (``(1 + error) / (1 + control's error) - 1``) divides that common factor out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from plait.hardware.catalog import load_cluster_file
from plait.hardware.cluster import Cluster
from plait.plan.io import read_plan_file
from plait.predict.mixed_result import MixedEstimate
from plait.run.precision import cpu_runs_natively
from plait.run.uneven import Uneven, parse_list
from plait.run.uneven import argv as uneven_argv
from plait.run.uneven_prediction import predict_uneven
from plait.workload.catalog import resolve_model

ROOT = Path(__file__).parents[1]
MODEL = ROOT / "examples" / "small-model.toml"
STEPS = 12  # a multiple of the local-SGD period (4): whole rounds
SLOWDOWN = 3.0
BATCH = "global_batch = 16\nmicro_batch = 4"
FULL_PRECISION = [] if cpu_runs_natively("bf16") else ["--full-precision"]
"""bf16 where this CPU would emulate it runs in fp32, as `plait run` does and as `plait calibrate` then measures."""


@dataclass(frozen=True)
class Case:
    """One layout: its plan body and what it runs unevenly (rank 0, the fast rank, first)."""

    name: str
    body: str
    uneven: Uneven


SLOW = parse_list(f"1,{SLOWDOWN:g}", "--slowdown", float)
CASES = (
    Case("ddp x1", f"dp_replicate = 2\n{BATCH}", Uneven()),  # control: equal ranks, the calibration's own error
    Case("ddp 8+8", f"dp_replicate = 2\n{BATCH}", Uneven(slowdown=SLOW)),
    Case("ddp 12+4", f"dp_replicate = 2\n{BATCH}", Uneven(slowdown=SLOW, batch_split=(12, 4))),
    Case("pp 2+2", f'pp = 2\nschedule = "1f1b"\n{BATCH}', Uneven(slowdown=SLOW)),
    Case("pp 3+1", f'pp = 2\nschedule = "1f1b"\n{BATCH}', Uneven(slowdown=SLOW, stage_layers=(3, 1))),
    Case("zero2 12+4", f'dp_shard = 2\nsharding = "zero2"\n{BATCH}', Uneven(slowdown=SLOW, batch_split=(12, 4))),
    Case("zero3 12+4", f'dp_shard = 2\nsharding = "zero3"\n{BATCH}', Uneven(slowdown=SLOW, batch_split=(12, 4))),
    Case("local 12+4", f'dp_replicate = 2\ndp_sync = "local_sgd:every=4"\n{BATCH}',
         Uneven(slowdown=SLOW, local_steps=(12, 4))),
)


def measure(case: Case, tmp: Path) -> tuple[float, float]:
    """Median step time after the first step of ``case`` on 2 ranks (torchrun), rank 1 slowed; and the CPU seconds
    the run's processes took (user + system)."""
    plan_file, metrics = tmp / f"{case.name.replace(' ', '-')}.toml", tmp / f"{case.name.replace(' ', '-')}.jsonl"
    plan_file.write_text(f'[job]\nmodel = "{MODEL}"\n[plan]\n{case.body}\n')
    before = os.times()
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m",
                    "plait.run.worker", "--plan", str(plan_file), "--steps", str(STEPS), "--metrics", str(metrics),
                    *uneven_argv(case.uneven), *FULL_PRECISION], check=True, capture_output=True)
    after = os.times()
    cpu_s = after.children_user + after.children_system - before.children_user - before.children_system
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    if case.uneven.local_steps:  # rank 0's steps: one round is local_steps[0] of them, the first one averaging
        return statistics.fmean(r["step_time_s"] for r in rows[case.uneven.local_steps[0]:]), cpu_s
    return statistics.median(r["step_time_s"] for r in rows[1:]), cpu_s


def predict(case: Case, cluster: Cluster, tmp: Path) -> MixedEstimate:
    """What ``plait run`` predicts for ``case``."""
    _, plan = read_plan_file(tmp / f"{case.name.replace(' ', '-')}.toml")
    estimated = predict_uneven(resolve_model(str(MODEL)), cluster, plan, case.uneven)
    assert estimated is not None, "every rank is a replica or a stage"
    return estimated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", type=Path, default=None, help="a calibrated description to reuse")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    cluster_file = args.cluster or tmp / "calibrated.toml"
    if args.cluster is None:
        subprocess.run([sys.executable, "-m", "plait", "calibrate", "--output", str(cluster_file)], check=True,
                       capture_output=True)
    calibrated = load_cluster_file(cluster_file)
    peaks = calibrated.accelerator.peak_tflops
    print(f"{calibrated.name}, rank 1 x{SLOWDOWN:g} slower but in ddp x1; {STEPS} steps, median after the first; {'fp32' if FULL_PRECISION else 'bf16'}; "
          f"calibrated matmul peak fp32 {peaks['fp32']:.3f} / bf16 {peaks['bf16']:.3f} TFLOP/s, collective latency "
          f"{calibrated.tiers[0].latency_us:.0f} us")
    print(f"{'layout':10s} {'measured s':>11s} {'predicted s':>12s} {'error':>7s} {'vs control':>10s}   "
          "predicted busy s (rank 0 / 1)   load   CPU s")
    measured, predicted = {}, {}
    for case in CASES:
        measured[case.name], cpu_s = measure(case, tmp)
        est = predict(case, calibrated, tmp)
        predicted[case.name] = est.step_time_s / est.plan.shares[0].local_steps  # rank 0's mean step
        busy = " / ".join(f"{g.busy_s:.4f}" for g in est.groups)
        ratio = predicted[case.name] / measured[case.name]
        control = ratio / (predicted["ddp x1"] / measured["ddp x1"])
        print(f"{case.name:10s} {measured[case.name]:11.4f} {predicted[case.name]:12.4f} {100 * (ratio - 1):+6.1f}% "
              f"{100 * (control - 1):+9.1f}%   {busy:29s} {os.getloadavg()[0]:5.1f} {cpu_s:7.1f}")
    for even, uneven in (("ddp 8+8", "ddp 12+4"), ("pp 2+2", "pp 3+1")):
        print(f"speed-up of {uneven} over {even}: measured {measured[even] / measured[uneven]:.2f}x, "
              f"predicted {predicted[even] / predicted[uneven]:.2f}x")


if __name__ == "__main__":
    main()
