"""Simulator speed: one step of Llama 3.1 405B with PP=16 and 128 micro-batches per pipeline (target <= 1 s).

Run: python benchmarks/simulate_speed.py
Times the whole simulation (per-rank costs from the estimator + the event simulation) for
the 1F1B, interleaved (v=4) and ZB-H1 schedules, best of 3 each, and prints the ratio to the target.
"""

from __future__ import annotations

import time

from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.job import Job
from plait.plan.plan import Plan
from plait.simulate.step import simulate_step
from plait.workload.catalog import get_model

TARGET_S = 1.0


def main() -> None:
    model, cluster = get_model("llama3.1-405b"), get_cluster("dgx-h100-ib")
    for schedule, vpp in (("1f1b", 1), ("interleaved", 4), ("zb-h1", 1)):
        plan = Plan(tp=8, sp=True, pp=16, vpp=vpp, schedule=schedule, dp_shard=8, sharding="zero1",
                    global_batch=1024, micro_batch=1, recompute="full")  # 1024 / dp 8 = 128 micro-batches
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            timeline = simulate_step(Job.build(model, cluster, plan, get_engine()))
            best = min(best, time.perf_counter() - start)
        print(f"{plan.describe():70s} {len(timeline.spans):6d} spans  {best:.3f} s = {best / TARGET_S:.2f} x target")


if __name__ == "__main__":
    main()
