"""Planner on the machine's cores: one process against a pool of workers, side by side in one run.

Run: python benchmarks/plan_workers.py [--workers N] [--rounds R]
Searches three spaces of Llama 3.1 405B on 16,384 H100 (dgx-h100-ib): the default one (one global batch) and ones
with four and eight global batch sizes, alternating ``workers=1`` and ``workers=N`` (default: every core) ``--rounds``
times; prints each median wall time beside the median CPU time of this process and the pool's worker processes
together (``os.times``: a pool is shut down, its workers reaped, before its search returns), candidates given a
verdict per wall second, and the wall ratio, the machine's load average before and after, and checks that both
find the same verdict counts and the same best plans. A pool gains wall time only where idle cores take its
workers: on a loaded machine the ratio falls while the CPU time does not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

# a sibling script (run as python benchmarks/<name>.py)
from machine_load import load_average

from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.search.parts import available_cores
from plait.search.runner import SearchResult, run_search
from plait.search.space import default_space
from plait.workload.catalog import get_model

SPACES = {"405B, batch 2048": (2048,), "405B, batch 512..4096": (512, 1024, 2048, 4096),
          "405B, batch 256..32768": (256, 512, 1024, 2048, 4096, 8192, 16384, 32768)}


def _cpu_s() -> float:
    """CPU seconds of this process and of its reaped children (user and system)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def timed(model, cluster, space, workers: int) -> tuple[float, float, SearchResult]:  # type: ignore[no-untyped-def]
    """(wall seconds, CPU seconds with the pool's workers, result) of one search."""
    start, cpu = time.perf_counter(), _cpu_s()
    result = run_search(model, cluster, space, workers=workers, engine=get_engine())
    return time.perf_counter() - start, _cpu_s() - cpu, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=available_cores())
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    model, cluster = get_model("llama3.1-405b"), get_cluster("dgx-h100-ib")
    load_before = load_average()
    print(f"{'space':24s} {'candidates':>10s} {'1 process s (CPU)':>18s} {f'{args.workers} workers s (CPU)':>18s} "
          f"{'cand/s pool':>12s} {'speed-up':>8s}")
    for name, batches in SPACES.items():
        space = default_space(model, cluster, 16384, batches)
        one, pool, one_cpu, pool_cpu = [], [], [], []
        for _ in range(args.rounds):
            t1, c1, serial = timed(model, cluster, space, 1)
            t2, c2, parallel = timed(model, cluster, space, args.workers)
            one.append(t1)
            pool.append(t2)
            one_cpu.append(c1)
            pool_cpu.append(c2)
        assert serial.reasons == parallel.reasons and serial.costed == parallel.costed
        assert [e.plan for e in serial.top(5)] == [e.plan for e in parallel.top(5)]
        a, b = statistics.median(one), statistics.median(pool)
        cells = (f"{a:.2f} ({statistics.median(one_cpu):.2f})", f"{b:.2f} ({statistics.median(pool_cpu):.2f})")
        print(f"{name:24s} {serial.num_candidates:10,d} {cells[0]:>18s} {cells[1]:>18s} "
              f"{serial.num_candidates / b:12,.0f} {a / b:8.2f}")
    print(f"medians of {args.rounds} rounds; load average (1, 5, 15 min) {load_before} before, {load_average()} after")


if __name__ == "__main__":
    main()
