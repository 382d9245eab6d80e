"""Planner speed: Llama 3.1 405B on 16,384 H100 (dgx-h100-ib) over the full default space.

Run: python benchmarks/plan_speed.py
Targets (issue 3): <= 2 s wall time and >= 100,000 candidate evaluations per second, in
one process. Prints the wall time, candidates given a verdict per second, the number that
reached the cost model (and their rate), and the ratios to both targets.
"""

from __future__ import annotations

import time

from plait.hardware.catalog import get_cluster
from plait.search.engine import run_search
from plait.search.space import default_space
from plait.workload.catalog import get_model

TARGET_WALL_S = 2.0
TARGET_RATE = 100_000


def main() -> None:
    model, cluster = get_model("llama3.1-405b"), get_cluster("dgx-h100-ib")
    start = time.perf_counter()
    space = default_space(model, cluster, 16384, (2048,))
    result = run_search(model, cluster, space)
    wall = time.perf_counter() - start
    rate = result.num_candidates / wall
    costed_rate = result.costed / wall
    best = result.top(1)[0]
    print(f"candidates {result.num_candidates:,}, costed {result.costed:,}, feasible {result.num_feasible:,}")
    print(f"wall {wall:.2f} s = {wall / TARGET_WALL_S:.2f} x the {TARGET_WALL_S} s target")
    print(f"candidates/s {rate:,.0f} = {rate / TARGET_RATE:.1f} x the {TARGET_RATE:,}/s target; "
          f"cost-model evaluations/s {costed_rate:,.0f}")
    print(f"best: {best.plan.describe()} at {best.tokens_per_s:,.0f} tokens/s, MFU {100 * best.mfu:.1f}%")


if __name__ == "__main__":
    main()
