"""Simulator speed: one step of Llama 3.1 405B with PP=16 and 128 micro-batches per pipeline (target <= 1 s).

Run: python benchmarks/simulate_speed.py [--repeats 5]
Times the whole simulation (per-rank costs from the estimator + the event simulation) for the 1F1B, interleaved
(v=4) and ZB-H1 schedules, ``--repeats`` times each, and prints the median CPU seconds of the thread
(``time.thread_time``: what the simulation itself costs, less exposed to a loaded machine's preemption) beside the
median wall seconds, the CPU median's ratio to the target, and the machine's load average before and after.
Each simulation starts with what estimates keep emptied (``plait.kept.empty_all`` and the cluster's collective
times): a plan seen first.
"""

from __future__ import annotations

import argparse
import statistics
import time

# a sibling script (run as python benchmarks/<name>.py)
from machine_load import load_average

from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.job import Job
from plait.kept import empty_all
from plait.plan.plan import Plan
from plait.simulate.step import simulate_step
from plait.workload.catalog import get_model

TARGET_S = 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="simulations of each schedule (medians printed)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats={args.repeats} must be >= 1")
    model, cluster = get_model("llama3.1-405b"), get_cluster("dgx-h100-ib")
    load_before = load_average()
    print(f"{'plan':70s} {'spans':>6s} {'CPU s':>7s} {'wall s':>7s} {'x target':>8s}")
    for schedule, vpp in (("1f1b", 1), ("interleaved", 4), ("zb-h1", 1)):
        plan = Plan(tp=8, sp=True, pp=16, vpp=vpp, schedule=schedule, dp_shard=8, sharding="zero1",
                    global_batch=1024, micro_batch=1, recompute="full")  # 1024 / dp 8 = 128 micro-batches
        cpu, wall = [], []
        for _ in range(args.repeats):
            empty_all()
            cluster.link_cache.pop("times", None)
            cpu0, wall0 = time.thread_time(), time.perf_counter()
            timeline = simulate_step(Job.build(model, cluster, plan, get_engine()))
            cpu.append(time.thread_time() - cpu0)
            wall.append(time.perf_counter() - wall0)
        median = statistics.median(cpu)
        print(f"{plan.describe():70s} {len(timeline.spans):6d} {median:7.3f} {statistics.median(wall):7.3f} "
              f"{median / TARGET_S:8.3f}")
    print(f"medians of {args.repeats}; load average (1, 5, 15 min) {load_before} before, {load_average()} after")


if __name__ == "__main__":
    main()
