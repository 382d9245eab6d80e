"""How fast plait schedule simulates: a 10,000-job Helios-shaped trace on 4,096 GPUs of dgx-h100-ib, each policy.

The trace offers 1.5x the cluster's GPUs over its arrival window (``synthetic_trace(load=1.5)``), so the queue builds
and every policy has work to do at every event (an idle cluster would time only the event loop). Prints jobs, GPUs,
policy, wall seconds of the simulation, the planner searches the speed model ran (shared by the policies: the first
one pays for the searches its placements need), mean JCT and both utilizations. Run:
``python benchmarks/schedule_speed.py``.
"""

from __future__ import annotations

import time

from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.schedule.policies import POLICY_NAMES, make_policy
from plait.schedule.pool import Pool
from plait.schedule.simulate import simulate
from plait.schedule.speed import SpeedModel
from plait.schedule.synthetic import synthetic_trace

JOBS, GPUS, CLUSTER, LOAD = 10_000, 4_096, "dgx-h100-ib", 1.5


def main() -> None:
    cluster = get_cluster(CLUSTER)
    speed = SpeedModel(cluster, get_engine())
    start = time.perf_counter()
    jobs = synthetic_trace("helios", JOBS, 0, speed, GPUS, LOAD)
    print(f"trace: {JOBS} jobs drawn in {time.perf_counter() - start:.1f} s ({speed.searches} planner searches), "
          f"offered load {LOAD} over the arrival window")
    print(f"{'jobs':>6} {'GPUs':>6} {'policy':<12} {'wall s':>7} {'searches':>8} {'mean JCT h':>10} "
          f"{'mean queue h':>12} {'util':>6} {'util arr':>8}")
    for name in POLICY_NAMES:
        before, search_s = speed.searches, speed.search_s
        start = time.perf_counter()
        result = simulate(jobs, Pool(cluster, GPUS), speed, make_policy(name))
        wall = time.perf_counter() - start
        s = result.summary()
        print(f"{JOBS:>6} {GPUS:>6} {name:<12} {wall:>7.1f} {speed.searches - before:>8} "
              f"{float(s['mean_jct_s']) / 3600:>10.2f} {float(s['mean_queue_s']) / 3600:>12.2f} "
              f"{float(s['utilization']):>6.3f} {float(s['utilization_arrivals']):>8.3f}"
              f"   (of which planner {speed.search_s - search_s:.1f} s)")


if __name__ == "__main__":
    main()
