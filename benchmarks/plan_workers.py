"""Planner on the machine's cores: one process against a pool of workers, side by side in one run.

Run: python benchmarks/plan_workers.py [--workers N] [--rounds R]
Searches two spaces of Llama 3.1 405B on 16,384 H100 (dgx-h100-ib): the default one (one global batch) and one
with four global batch sizes, alternating ``workers=1`` and ``workers=N`` (default: every core) ``--rounds``
times; prints each median wall time, candidates given a verdict per second, and the ratio, and checks that
both find the same verdict counts and the same best plans.
"""

from __future__ import annotations

import argparse
import statistics
import time

from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.search.parts import available_cores
from plait.search.runner import SearchResult, run_search
from plait.search.space import default_space
from plait.workload.catalog import get_model

SPACES = {"405B, batch 2048": (2048,), "405B, batch 512..4096": (512, 1024, 2048, 4096)}


def timed(model, cluster, space, workers: int) -> tuple[float, SearchResult]:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    result = run_search(model, cluster, space, workers=workers, engine=get_engine())
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=available_cores())
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    model, cluster = get_model("llama3.1-405b"), get_cluster("dgx-h100-ib")
    print(f"{'space':24s} {'candidates':>10s} {'1 process s':>11s} {f'{args.workers} workers s':>11s} "
          f"{'cand/s pool':>12s} {'speed-up':>8s}")
    for name, batches in SPACES.items():
        space = default_space(model, cluster, 16384, batches)
        one, pool = [], []
        for _ in range(args.rounds):
            t1, serial = timed(model, cluster, space, 1)
            t2, parallel = timed(model, cluster, space, args.workers)
            one.append(t1)
            pool.append(t2)
        assert serial.reasons == parallel.reasons and serial.costed == parallel.costed
        assert [e.plan for e in serial.top(5)] == [e.plan for e in parallel.top(5)]
        a, b = statistics.median(one), statistics.median(pool)
        print(f"{name:24s} {serial.num_candidates:10,d} {a:11.2f} {b:11.2f} {serial.num_candidates / b:12,.0f} "
              f"{a / b:8.2f}")


if __name__ == "__main__":
    main()
