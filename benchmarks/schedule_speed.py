"""How fast plait schedule simulates: a Helios-shaped trace (default 10,000 jobs on 4,096 GPUs of dgx-h100-ib),
each policy; ``--jobs 100000 --gpus 16384`` is a Philly-scale trace (the public Philly trace holds 117,325 jobs,
msr-fiddle/philly-traces README; this one Helios-shaped, at the same offered load of 1.5).

The trace offers 1.5x the cluster's GPUs over its arrival window (``synthetic_trace(load=1.5)``), so the queue builds
and every policy has work to do at every event (an idle cluster would time only the event loop). Prints jobs, GPUs,
policy, wall and CPU seconds of the simulation (CPU: this process's, so a loaded machine's preemption does not count),
the planner searches the speed model ran (shared by the policies: the first one pays for the searches its placements
need), mean JCT and both utilizations, and the machine's load average before and after each policy. Run:
``python benchmarks/schedule_speed.py [--jobs N] [--gpus G] [--family helios|philly|pai] [--policy NAME]``.
"""

from __future__ import annotations

import argparse
import os
import time

from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.schedule.policies import POLICY_NAMES, make_policy
from plait.schedule.pool import Pool
from plait.schedule.simulate import simulate
from plait.schedule.speed import SpeedModel
from plait.schedule.synthetic import synthetic_trace

CLUSTER, LOAD, SEED = "dgx-h100-ib", 1.5, 0


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f} on {os.cpu_count()} CPUs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs in the trace")
    parser.add_argument("--gpus", type=int, default=4_096, help="GPUs in the pool")
    parser.add_argument("--family", default="helios", help="synthetic trace family")
    parser.add_argument("--policy", action="append", choices=POLICY_NAMES, help="policy to time (repeatable; default all)")
    args = parser.parse_args()
    cluster = get_cluster(CLUSTER)
    speed = SpeedModel(cluster, get_engine())
    start, cpu = time.perf_counter(), time.process_time()
    jobs = synthetic_trace(args.family, args.jobs, SEED, speed, args.gpus, LOAD)
    print(f"trace: {args.jobs} {args.family} jobs drawn in {time.perf_counter() - start:.1f} s wall, "
          f"{time.process_time() - cpu:.1f} s CPU ({speed.searches} planner searches), offered load {LOAD} over "
          f"the arrival window; {_load()}")
    print(f"{'jobs':>6} {'GPUs':>6} {'policy':<12} {'wall s':>7} {'CPU s':>7} {'searches':>8} {'mean JCT h':>10} "
          f"{'mean queue h':>12} {'util':>6} {'util arr':>8}")
    for name in args.policy or POLICY_NAMES:
        before, search_s, search_cpu_s, load = speed.searches, speed.search_s, speed.search_cpu_s, _load()
        start, cpu = time.perf_counter(), time.process_time()
        result = simulate(jobs, Pool(cluster, args.gpus), speed, make_policy(name))
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        s = result.summary()
        pairs = f" ({s['pairs']} pairs, mean gain {float(s['mean_pair_gain']):.3f})" if "pairs" in s else ""
        print(f"{args.jobs:>6} {args.gpus:>6} {name:<12} {wall:>7.1f} {cpu:>7.1f} {speed.searches - before:>8} "
              f"{float(s['mean_jct_s']) / 3600:>10.2f} {float(s['mean_queue_s']) / 3600:>12.2f} "
              f"{float(s['utilization']):>6.3f} {float(s['utilization_arrivals']):>8.3f}"
              f"{pairs}   (planner {speed.search_s - search_s:.1f} s wall, "
              f"{speed.search_cpu_s - search_cpu_s:.1f} s CPU; "
              f"before: {load}; after: {_load()})", flush=True)


if __name__ == "__main__":
    main()
