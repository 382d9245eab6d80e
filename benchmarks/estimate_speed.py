"""How long one estimate takes (target: worst median <= 0.25 ms of CPU time on the 2-core CI machine).

Run: python benchmarks/estimate_speed.py [--cold | --sweep]
Times several representative plans, each repeated, in one process, and prints per plan the median milliseconds
per estimate of the thread's CPU time (``time.thread_time``: what the estimate itself costs, less exposed to a
shared machine's other work) beside wall-clock time, the ratio of the CPU median to the budget, and the machine's
load average before and after (``os.getloadavg``). Each plan is estimated again and again, so what one estimate
keeps for the next (per-layer quantities and FSDP times by the fields they read, collective times, the rule and
engine checks of a plan seen before) is found kept; ``--cold`` empties all of it before every estimate: a plan seen
first, with nothing shared with earlier ones (a ``plait estimate`` process); ``--sweep`` empties it once per plan
and then estimates the plan at 200 global batch sizes, each a plan not seen before of a model and cluster estimated
before (a user's sweep of batch sizes: what the plan's other fields decide is found kept, what the batch decides,
its micro-batch count, pipeline and sync, is costed afresh).
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

# a sibling script (run as python benchmarks/<name>.py)
from machine_load import load_average

from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.workload.catalog import get_model

BUDGET_MS = 0.25
CASES = [
    ("llama3-8b", "dgx-h100-ib", Plan(dp_shard=8, sharding="zero3", global_batch=128)),
    ("llama3.1-405b", "dgx-h100-ib", Plan(tp=8, sp=True, pp=16, vpp=4, schedule="interleaved", cp=2, dp_shard=8,
                                          sharding="zero1", global_batch=256, recompute="selective")),
    ("gpt3-175b", "dgx-a100-ib", Plan(tp=8, pp=8, vpp=3, schedule="interleaved", dp_replicate=16, global_batch=1536,
                                      recompute="full")),
    ("llama3.1-405b", "dgx-h100-ib", Plan(tp=8, sp=True, pp=8, dp_shard=16, sharding="zero3", global_batch=128,
                                          recompute="full")),  # 8 x 8 x 1 passes: timed by the simulation
    ("deepseek-v3", "gb200-nvl72", Plan(tp=2, pp=8, ep=32, dp_shard=64, sharding="zero1", global_batch=4096,
                                        precision="fp8", recompute="full")),
]


def empty_kept() -> None:
    """Forget every value estimates keep for later ones (module-level tables, and each catalog cluster's collective
    times)."""
    from plait.kept import empty_all

    empty_all()
    for _, cluster, _ in CASES:
        get_cluster(cluster).link_cache.pop("times", None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--cold", action="store_true", help="empty what estimates keep before every estimate")
    modes.add_argument("--sweep", action="store_true", help="each estimate a new global batch of the plan")
    args = parser.parse_args()
    cold, sweep = args.cold, args.sweep
    models = {m: get_model(m) for m, _, _ in CASES}
    clusters = {c: get_cluster(c) for _, c, _ in CASES}
    load_before = load_average()
    print(f"{'case':45s} {'CPU ms':>8s} {'wall ms':>8s} {'x budget':>9s}")
    medians = []
    for model, cluster, plan in CASES:
        cpu, wall = [], []
        if sweep:
            empty_kept()
        # a sweep's k-th plan: k more micro-batch rounds of every replica (each pipeline's count stays a multiple of
        # its stages, as the interleaved schedule needs)
        step = plan.dp * plan.micro_batch * plan.pp
        for k in range(200):
            if cold:
                empty_kept()
            planned = replace(plan, global_batch=plan.global_batch + (k + 1) * step) if sweep else plan
            start, start_cpu = time.perf_counter(), time.thread_time()
            _ = estimate(models[model], clusters[cluster], planned,
                         engine=get_engine()).step_time_interval_s  # with its p10/p90
            cpu.append((time.thread_time() - start_cpu) * 1e3)
            wall.append((time.perf_counter() - start) * 1e3)
        median = statistics.median(cpu)
        medians.append(median)
        print(f"{model + ' / ' + plan.describe()[:30]:45s} {median:8.3f} {statistics.median(wall):8.3f} "
              f"{median / BUDGET_MS:9.3f}")
    worst = max(medians)
    mode = "plans seen first" if cold else "new batch sizes of each plan" if sweep else "plans estimated again"
    print(f"{mode}: worst CPU median {worst:.3f} ms = {worst / BUDGET_MS:.3f} x the {BUDGET_MS} ms budget "
          f"({'within' if worst <= BUDGET_MS else 'OVER'} budget); load average (1, 5, 15 min) "
          f"{load_before} before, {load_average()} after")


if __name__ == "__main__":
    main()
