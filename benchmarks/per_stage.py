"""Per-stage recomputation, sharding and layer split (plait.search.per_stage): its time beside the uniform search, and
the best per-stage plan against the best uniform one and against the best whose stages all shard alike.

Run: python benchmarks/per_stage.py [--repeat 3]
Target: the per-stage pass adds <= 2 s to ``plait plan`` for Llama 3.1 405B on 16,384 H100 (the whole planner,
uniform search included, <= 2 s is not the target here: benchmarks/plan_speed.py measures that search).

Per case: the uniform search (``plait plan``'s space: the all-reduce and every method with a steps multiplier,
parameter servers; one process), its top 5 (simulated), then the per-stage pass as ``plait plan`` runs it
(:func:`plait.search.per_stage.pipelines` and :func:`~plait.search.per_stage.improve`), each as wall and CPU time
(medians of ``--repeat``), and the best uniform plan against the best per-stage one (predicted tokens/s).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import replace

from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.plan.convergence import searched_specs
from plait.search.per_stage import improve, pipelines
from plait.search.runner import run_search
from plait.search.space import default_space
from plait.sync import ALLREDUCE
from plait.workload.catalog import get_model

FIXED = {"tp": (2,), "pp": (2,), "schedules": ("1f1b",), "offload": ((False, False),), "cp": (1,)}
"""A search that fixes the layout at tp2 pp2 under 1F1B without offloading or context parallelism: its pipelines
shard over ``dp_shard`` ranks, where a stage's sharding is a choice (the whole space's best plans are interleaved
or offloaded, which the per-stage pass does not re-split)."""
CASES = (  # model, cluster, GPUs, global batch, sequence length (0: the model's), engine[, space restricted to]
    ("llama3.1-405b", "dgx-h100-ib", 16384, 2048, 0, "megatron-core"),
    ("llama3-70b", "dgx-a100-ib", 64, 512, 0, "megatron-core"),
    ("llama3.1-405b", "dgx-h100-ib", 1024, 2048, 0, "megatron-core"),
    ("llama2-13b", "dgx-a100-40gb", 16, 256, 4096, "megatron-lm@2022"),
    ("llama2-13b", "dgx-a100-40gb", 16, 256, 4096, "megatron-core"),
    ("llama2-13b", "dgx-a100-40gb", 16, 256, 4096, "megatron-core", FIXED),
    ("llama3-8b", "dgx-a100-40gb", 16, 256, 2048, "plait", {**FIXED, "tp": (1,)}),
)
MARGIN = 0.05
"""``plait plan``'s default --memory-margin."""


def timed(call):  # type: ignore[no-untyped-def]
    """(result, wall seconds, CPU seconds of this process) of ``call()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = call()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def one_case(name: str, cluster_name: str, gpus: int, batch: int, seq_len: int, engine_name: str,
             fixed: dict | None = None, *, repeat: int) -> None:
    model, cluster, engine = get_model(name), get_cluster(cluster_name), get_engine(engine_name)
    syncs = tuple(dict.fromkeys([ALLREDUCE, *searched_specs()]))
    space = default_space(model, cluster, gpus, (batch,), seq_len=seq_len, dp_syncs=syncs, param_servers=True,
                          memory_margin=MARGIN)
    space = replace(space, **(fixed or {}))
    runs = []
    for _ in range(repeat):
        result, search_wall, search_cpu = timed(lambda: run_search(model, cluster, space, workers=1, engine=engine))
        top, top_wall, top_cpu = timed(lambda r=result: r.top(5))
        wins, wall, cpu = timed(lambda r=result, t=top: improve(model, cluster, engine, pipelines(r, t), MARGIN))
        runs.append((search_wall, search_cpu, top_wall, top_cpu, wall, cpu))
    search_wall, search_cpu, top_wall, top_cpu, wall, cpu = (statistics.median(r[i] for r in runs) for i in range(6))
    print(f"{name} on {gpus:,} {cluster_name}, gb {batch}{f', seq {seq_len}' if seq_len else ''}, {engine_name}"
          f"{f', space restricted to {fixed}' if fixed else ''}:")
    print(f"  uniform search wall {search_wall:.3f} s CPU {search_cpu:.3f} s; top 5 wall {top_wall:.3f} s CPU "
          f"{top_cpu:.3f} s; per-stage pass wall {wall:.3f} s CPU {cpu:.3f} s "
          f"(+{100 * cpu / (search_cpu + top_cpu):.0f}% of the planner's CPU time)")
    if not top:
        print("  nothing fits")
        return
    best = top[0]
    print(f"  best uniform:   {best.plan.describe()}  {best.tokens_per_s:,.0f} tokens/s")
    if not wins:
        print("  best per-stage: none beats its uniform pipeline")
        return
    win = wins[0]
    print(f"  best per-stage: {win.better.plan.describe()}  {win.better.tokens_per_s:,.0f} tokens/s "
          f"({100 * win.gain:+.1f}% over its uniform {win.uniform.plan.describe()}, "
          f"{100 * (win.better.target_tokens_per_s / best.target_tokens_per_s - 1):+.1f}% over the best uniform)")
    alike = improve(model, cluster, engine, pipelines(result, top), MARGIN, vary_sharding=False)
    if alike:
        print(f"  every stage sharded alike: {alike[0].better.plan.describe()}  {alike[0].better.tokens_per_s:,.0f} "
              "tokens/s")
    else:
        print("  every stage sharded alike: none beats its uniform pipeline")
    with_it = max(best.target_tokens_per_s, win.better.target_tokens_per_s)
    without = max([best.target_tokens_per_s, *(w.better.target_tokens_per_s for w in alike[:1])])
    print(f"  the best plan with the sharding choice vs without it (uniform or per-stage): "
          f"{100 * (with_it / without - 1):+.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (medians are printed)")
    parser.add_argument("--cases", default="", help="indices of CASES to run, comma-separated (default: all)")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    chosen = [CASES[int(i)] for i in args.cases.split(",")] if args.cases else list(CASES)
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    for case in chosen:
        one_case(*case, repeat=args.repeat)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
