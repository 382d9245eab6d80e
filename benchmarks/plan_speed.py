"""Planner speed: Llama 3.1 405B on 16,384 H100 (dgx-h100-ib) over the full default space.

Run: python benchmarks/plan_speed.py [--workers N]
Targets: <= 1 s wall time (an earlier target was <= 2 s) and >= 100,000 candidate evaluations per second.
The search uses the default worker count (every core for a space this size, :mod:`plait.search.parts`) unless
``--workers`` says otherwise. Prints the wall time, candidates given a verdict per second, the number that
reached the cost model (and their rate), and the ratios to both targets.
"""

from __future__ import annotations

import argparse
import time

from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.search.parts import POOL_MIN_CANDIDATES, available_cores
from plait.search.runner import run_search
from plait.search.space import default_space
from plait.workload.catalog import get_model

TARGET_WALL_S = 1.0
TARGET_RATE = 100_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=None, help="worker processes (default: plait's choice)")
    args = parser.parse_args()
    model, cluster = get_model("llama3.1-405b"), get_cluster("dgx-h100-ib")
    start = time.perf_counter()
    space = default_space(model, cluster, 16384, (2048,))
    result = run_search(model, cluster, space, workers=args.workers, engine=get_engine())
    wall = time.perf_counter() - start
    rate = result.num_candidates / wall
    costed_rate = result.costed / wall
    best = result.top(1)[0]
    workers = args.workers or (available_cores() if result.num_candidates >= POOL_MIN_CANDIDATES else 1)
    print(f"candidates {result.num_candidates:,}, costed {result.costed:,}, feasible {result.num_feasible:,}; "
          f"{workers} worker process{'es' * (workers > 1)}")
    print(f"wall {wall:.2f} s = {wall / TARGET_WALL_S:.2f} x the {TARGET_WALL_S} s target")
    print(f"candidates/s {rate:,.0f} = {rate / TARGET_RATE:.1f} x the {TARGET_RATE:,}/s target; "
          f"cost-model evaluations/s {costed_rate:,.0f}")
    print(f"best: {best.plan.describe()} at {best.tokens_per_s:,.0f} tokens/s, MFU {100 * best.mfu:.1f}%")


if __name__ == "__main__":
    main()
