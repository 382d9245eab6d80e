"""GLM steps and federated rounds on this machine's gloo ranks, measured against plait's prediction on a calibrated
description of this machine (target: within 20% on a quiet machine).

Run: ``python benchmarks/glm_federated_cpu.py [--cluster calibrated.toml] [--glm-steps 200] [--rounds 20]``
1. ``plait calibrate`` measures this machine into a temporary cluster file (or ``--cluster`` gives one it wrote):
   DRAM bandwidth and the fraction streaming ops reach, the per-op dispatch, gloo's latency and bus bandwidth.
2. ``plait run --model examples/glm-tiny.toml --gpus 2`` (:func:`plait.workloads.glm.run.run_glm`): each SGD method's
   step, the slowest rank's median after the warm-up, beside :func:`plait.workloads.glm.run_cost.run_step_s`.
3. ``plait run --model examples/federated-toy.toml`` (:func:`plait.workloads.federated.run.run_federated`): PFLEGO's
   and FedAvg's round as the server times it beside :func:`plait.workloads.federated.loopback.loopback_round`.
Printed: each run's own tables, then one summary: measured, predicted, predicted / measured, the CPU seconds of the
step (the slowest rank's thread; federated: the slowest client's) and predicted / CPU, the load average before and
after, and this process's and its children's CPU time beside the wall time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from plait.workloads import load
from plait.workloads.federated.run import run_federated
from plait.workloads.glm.run import run_glm

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cluster", type=Path, help="a cluster file plait calibrate wrote (default: calibrate now)")
    p.add_argument("--glm-steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=20)
    args = p.parse_args()
    wall, load_before = time.perf_counter(), os.getloadavg()
    cluster = args.cluster
    if cluster is None:
        cluster = Path(tempfile.mkdtemp()) / "calibrated.toml"
        subprocess.run([sys.executable, "-m", "plait", "calibrate", "--output", str(cluster)], check=True,
                       capture_output=True)
    glm = run_glm(load(str(ROOT / "examples/glm-tiny.toml")).description, 2, args.glm_steps, False, str(cluster))
    fed = run_federated(load(str(ROOT / "examples/federated-toy.toml")).description, args.rounds, False, str(cluster))
    assert glm is not None and fed is not None
    print(f"\ncluster {cluster}; measured: median after the warm-up of the slowest rank (GLM) / the server (rounds)")
    print(f"{'':<28} {'measured ms':>12} {'predicted ms':>13} {'pred/meas':>10} {'CPU ms':>8} {'pred/CPU':>9}")
    rows = [(f"glm {m} step", glm.step_s[m], glm.predicted_step_s[m], glm.step_cpu_s[m]) for m in glm.step_s]
    rows += [(f"federated {m} round", r["round_s"], r["predicted_s"], r.get("client_cpu_s", float("nan")))
             for m, r in fed.items()]
    for name, measured, predicted, cpu in rows:
        print(f"{name:<28} {measured * 1e3:>12.3f} {predicted * 1e3:>13.3f} {predicted / measured:>10.2f} "
              f"{cpu * 1e3:>8.3f} {predicted / cpu:>9.2f}")
    times = os.times()
    print(f"load average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
          f"wall {time.perf_counter() - wall:.1f} s, CPU {times.user + times.system:.1f} s here and "
          f"{times.children_user + times.children_system:.1f} s in the ranks")


if __name__ == "__main__":
    main()
