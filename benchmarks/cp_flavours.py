"""Which context-parallel flavour the planner picks on long sequences, and why: ring, Ulysses or LSS.

Run: python benchmarks/cp_flavours.py [--engine plait] [--workers 1]

For each case (model, cluster, GPUs, sequence length, global batch) the planner searches the layouts with cp > 1
once per flavour (``cp_attentions`` of the space holding that one) and once with all three, as ``plait plan`` does.
It prints each flavour's best plan with its predicted tokens/s, exposed CP communication, attention compute and
activation memory, and then the LSS winner's layout costed with each flavour: the terms that make LSS win or lose.
plait is the only engine that runs Ulysses and LSS (the capability table); the others search the ring only.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace

from plait.cost.estimate import Estimate
from plait.engine.catalog import get_engine
from plait.engine.engine import Engine
from plait.hardware.catalog import get_cluster
from plait.predict.estimate import estimate
from plait.search.runner import SearchResult, run_search
from plait.search.space import default_space
from plait.workload.catalog import get_model

GIB = 2**30
CASES = (("llama3-8b", "dgx-h100-ib", 64, 131072, 64), ("llama3-70b", "dgx-h100-ib", 256, 65536, 64))
FLAVOURS = ("ring", "ulysses", "lss")


def _line(est: Estimate) -> str:
    t, m = est.time, est.memory
    return (f"{est.tokens_per_s:>10,.0f} tokens/s  step {est.step_time_s:7.3f} s  cp_comm {t.cp_comm_s:6.3f} s  "
            f"compute {t.compute_s:7.3f} s  activations {m.activations_bytes / GIB:5.1f} GiB  {est.plan.describe()}")


def _best(result: SearchResult) -> Estimate | None:
    best = result.top(1)
    return best[0] if best else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="plait")
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    engine: Engine = get_engine(args.engine)
    wall, cpu = time.perf_counter(), time.process_time()
    for name, cluster_name, gpus, seq, batch in CASES:
        model, cluster = get_model(name), get_cluster(cluster_name)
        whole = default_space(model, cluster, gpus, (batch,), seq_len=seq)
        space = replace(whole, cp=tuple(c for c in whole.cp if c > 1))
        print(f"{name} on {gpus} GPUs of {cluster_name}, {seq:,} tokens per sequence, global batch {batch}, "
              f"{engine.spec}:")
        winners: dict[str, Estimate] = {}
        for flavour in (*FLAVOURS, "all"):
            searched = replace(space, cp_attentions=FLAVOURS if flavour == "all" else (flavour,))
            best = _best(run_search(model, cluster, searched, engine=engine, workers=args.workers))
            print(f"  {flavour:>7}: {_line(best) if best else '(nothing fits)'}")
            if best:
                winners[flavour] = best
        overall = _best(run_search(model, cluster, whole, engine=engine, workers=args.workers))
        print(f"  cp >= 1: {_line(overall) if overall else '(nothing fits)'}")
        if "lss" in winners:
            print("  the LSS winner's layout with each flavour:")
            for flavour in FLAVOURS:
                plan = replace(winners["lss"].plan, cp_attention=flavour)
                print(f"  {flavour:>7}: {_line(estimate(model, cluster, plan, engine=engine))}")
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"{wall:.1f} s wall, {cpu:.1f} s CPU, load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
