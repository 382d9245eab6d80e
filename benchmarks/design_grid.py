"""Design-search speed: a 5 x 5 grid of hypothetical H100 variations for Llama 3 70B on 1,024 GPUs.

Run: python benchmarks/design_grid.py [--vary peak=0.8,1,1.25,1.5,2 --vary hbm_bw=0.8,1,1.25,1.5,2] [--gpus 1024]

Each of the 25 points is a whole planner search (``plait design``'s: the default space, the all-reduce, one
process); then the 7 sensitivities (each parameter +10%, the scale-up domain x2) at the cheapest point within
``--deadline-days``. It prints the grid's and the sensitivities' wall and CPU time (this process's: on a shared
machine the wall time also counts the time other processes held the cores) and the load average before and after.
Every point but the base is HYPOTHETICAL hardware, priced by design.toml's assumed shares.
"""

from __future__ import annotations

import argparse
import os
import time

from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.hardware.variation import default_price_shares
from plait.search.design import DesignRequest, cheapest, grid, parse_values, search_grid, sensitivities
from plait.workload.catalog import get_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama3-70b")
    parser.add_argument("--cluster", default="dgx-h100-ib")
    parser.add_argument("--gpus", type=int, default=1024)
    parser.add_argument("--global-batch", type=int, default=512)
    parser.add_argument("--tokens", type=float, default=15e12)
    parser.add_argument("--deadline-days", type=float, default=90.0)
    parser.add_argument("--vary", action="append", default=None)
    args = parser.parse_args()
    axes = args.vary or ["peak=0.8,1,1.25,1.5,2", "hbm_bw=0.8,1,1.25,1.5,2"]
    base = get_cluster(args.cluster)
    request = DesignRequest(model=get_model(args.model), base=base, engine=get_engine("megatron-core"),
                            gpus=(args.gpus,), global_batches=(args.global_batch,), tokens=args.tokens,
                            shares={k: f.value for k, f in default_price_shares().items()})
    variations = grid([parse_values(a) for a in axes])
    load_before = os.getloadavg()[0]
    wall, cpu = time.perf_counter(), time.process_time()
    points = search_grid(request, variations)
    grid_wall, grid_cpu = time.perf_counter() - wall, time.process_time() - cpu
    choice = cheapest(points, args.deadline_days)
    wall, cpu = time.perf_counter(), time.process_time()
    sens = sensitivities(request, choice) if choice is not None else []
    sens_wall, sens_cpu = time.perf_counter() - wall, time.process_time() - cpu
    for p in points:
        best = p.best
        shown = "nothing fits" if best is None else (f"{best.estimate.step_time_s:6.3f} s/step {best.days:6.1f} d "
                                                     f"${best.dollars / 1e6:6.2f}M  {best.estimate.plan.describe()}")
        print(f"{'HYPOTHETICAL ' if p.hypothetical else 'base         '}{p.variation.label:28s} "
              f"${p.cluster.price_per_gpu_hour_usd:5.2f}/GPU-h  {shown}")
    if choice is not None and choice.best is not None:
        print(f"cheapest within {args.deadline_days:g} days: {choice.variation.label} ({choice.best.days:.1f} days, "
              f"${choice.best.dollars / 1e6:.2f}M)")
    for s in sens:
        print(f"  {s.parameter:14s} x{s.step:g}: step {s.step_time_change:+.2%}, price {s.price_change:+.2%}, "
              f"$ to train {s.cost_change:+.2%}{', new plan' if s.plan_changed else ''}")
    print(f"{len(points)} points: wall {grid_wall:.2f} s, CPU {grid_cpu:.2f} s ({grid_cpu / len(points):.3f} s CPU a "
          f"point); {len(sens)} sensitivities: wall {sens_wall:.2f} s, CPU {sens_cpu:.2f} s; load average "
          f"{load_before:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
