"""Planner speed: Llama 3.1 405B on H100 (dgx-h100-ib) over the space ``plait plan`` searches by default.

Run: python benchmarks/plan_speed.py [--workers N] [--gpus 1024,16384,131072] [--repeat 3]
Targets: the search <= 0.3 s wall time in one process (``--workers 1``) at 16,384 GPUs, and the refinement of the
top plans by the event simulation (``plait plan``'s default top 5) <= 20% of the search at every GPU count.

Per GPU count it prints the search (enumerate, prune, cost, rank) and the refinement (``SearchResult.top(5)``),
each as wall time and as CPU time (this process's and its worker processes': on a shared machine the wall time
also counts the time other processes held the cores), the median of ``--repeat`` runs, and the machine's load average
(1 minute) before and after. The space is ``plait plan``'s default for the model: every layout and knob, the
all-reduce and every synchronization method with a steps multiplier, parameter servers included. GPU counts above
the preset's 32,768 run on ``benchmarks/clusters/dgx-h100-ib-131k.toml`` (the same preset with its InfiniBand
tier spanning 131,072 GPUs, assumed; a benchmark cluster, not a measured one).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster, load_cluster_file
from plait.hardware.cluster import Cluster
from plait.plan.convergence import searched_specs
from plait.search.parts import POOL_MIN_CANDIDATES, available_cores
from plait.search.runner import SearchResult, run_search
from plait.search.space import default_space
from plait.sync import ALLREDUCE
from plait.workload.catalog import get_model

TARGET_SEARCH_S = 0.3
TARGET_REFINE_SHARE = 0.2
TOP = 5
"""Plans ``plait plan`` lists by default (its ``--top``)."""
LARGE = Path(__file__).resolve().parent / "clusters" / "dgx-h100-ib-131k.toml"


def cluster_for(gpus: int) -> Cluster:
    """The preset, or the benchmark cluster for counts beyond it."""
    preset = get_cluster("dgx-h100-ib")
    return preset if gpus <= preset.max_gpus else load_cluster_file(LARGE)


def cpu_s() -> float:
    """CPU seconds of this process (``time.process_time``) and of its finished children (a worker pool's, counted
    once the pool is joined; ``os.times``, in clock ticks)."""
    times = os.times()
    return time.process_time() + times.children_user + times.children_system


def timed(call):  # type: ignore[no-untyped-def]
    """(result, wall seconds, CPU seconds) of ``call()``."""
    wall, cpu = time.perf_counter(), cpu_s()
    out = call()
    return out, time.perf_counter() - wall, cpu_s() - cpu


def one_run(gpus: int, batch: int, workers: int | None) -> tuple[SearchResult, float, float, float, float]:
    """(result, search wall, search CPU, refinement wall, refinement CPU) of one search at ``gpus``."""
    model, cluster, engine = get_model("llama3.1-405b"), cluster_for(gpus), get_engine()
    syncs = tuple(dict.fromkeys([ALLREDUCE, *searched_specs()]))  # plait plan's default (plait.search.request)

    def search() -> SearchResult:
        space = default_space(model, cluster, gpus, (batch,), dp_syncs=syncs, param_servers=True)
        return run_search(model, cluster, space, workers=workers, engine=engine)

    result, search_wall, search_cpu = timed(search)
    _, refine_wall, refine_cpu = timed(lambda: result.top(TOP))
    return result, search_wall, search_cpu, refine_wall, refine_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=None, help="worker processes (default: plait's choice)")
    parser.add_argument("--gpus", default="16384", help="GPU counts, comma-separated (e.g. 1024,16384,131072)")
    parser.add_argument("--global-batch", type=int, default=2048, help="sequences per step (Llama 3: 2,048 x 8k)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per GPU count (medians are printed)")
    args = parser.parse_args()
    try:
        counts = [int(g) for g in args.gpus.split(",")]
    except ValueError:
        parser.error(f"--gpus {args.gpus!r} must be comma-separated GPU counts, e.g. 1024,16384")
    if min(counts) < 1 or args.repeat < 1 or (args.workers is not None and args.workers < 1):
        parser.error("--gpus counts, --repeat and --workers must be >= 1")
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    for gpus in counts:
        runs = [one_run(gpus, args.global_batch, args.workers) for _ in range(args.repeat)]
        result = runs[-1][0]
        search_wall, search_cpu, refine_wall, refine_cpu = (statistics.median(r[i] for r in runs) for i in range(1, 5))
        workers = args.workers or (available_cores() if result.num_candidates >= POOL_MIN_CANDIDATES else 1)
        best = result.top(1)
        print(f"{gpus:,} GPUs ({result.cluster.name}): candidates {result.num_candidates:,}, costed "
              f"{result.costed:,}, feasible {result.num_feasible:,}; {workers} worker process{'es' * (workers > 1)}")
        print(f"  search   wall {search_wall:.3f} s, CPU {search_cpu:.3f} s (this process and its workers)"
              f" = {search_wall / TARGET_SEARCH_S:.2f} x the {TARGET_SEARCH_S} s target; "
              f"{result.num_candidates / search_wall:,.0f} candidates/s")
        share = refine_cpu / search_cpu if search_cpu else float("inf")
        print(f"  refine   wall {refine_wall:.3f} s, CPU {refine_cpu:.3f} s (top {TOP}) = {100 * share:.0f}% of the "
              f"search's CPU time (target <= {100 * TARGET_REFINE_SHARE:.0f}%)")
        print(f"  best: {best[0].plan.describe()} at {best[0].tokens_per_s:,.0f} tokens/s, MFU {100 * best[0].mfu:.1f}%"
              if best else "  best: nothing fits")
        print(f"  medians of {args.repeat} runs; load average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
