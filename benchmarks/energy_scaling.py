"""Scaling GPUs at a fixed global batch: throughput, energy per token and the best layout, by plait's model.

Reproduces the two headline observations of Fernandez et al., "Hardware Scaling Trends and Diminishing Returns in
Large-Scale Distributed Training" (TMLR 2025, arXiv 2411.13055; Llama-style models up to 70B on up to 2,048 H100):
(1) scaled out naively, fully sharded data parallelism's communication grows to dominate, so layouts with model
parallelism (tensor, pipeline) become the better ones; (2) adding GPUs gives quickly diminishing returns in
throughput per GPU and per watt. Nothing here is fitted to the paper: plait's time model and the power figures of
``power.toml`` (``plait.cost.energy``) only.

Run: python benchmarks/energy_scaling.py [--models llama2-7b,llama2-70b] [--gpus 8:2048] [--global-batch 2048]

For each GPU count it searches every layout (bf16, all-reduce) and the data-parallel-only ones (DDP/ZeRO/FSDP:
tp = pp = cp = 1), and prints each one's best plan by throughput with its tokens/s per GPU, joules per token and
average power, then the ratios from the smallest to the largest count.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace

from plait.cost.estimate import Estimate
from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.search.runner import run_search
from plait.search.space import default_space
from plait.workload.catalog import get_model


def best(model_name: str, cluster_name: str, gpus: int, batch: int, dp_only: bool) -> Estimate | None:
    """The highest-throughput feasible plan (``dp_only``: with tp = pp = cp = 1)."""
    model, cluster = get_model(model_name), get_cluster(cluster_name)
    space = default_space(model, cluster, gpus, (batch,), precisions=("bf16",))
    if dp_only:
        space = replace(space, tp=(1,), pp=(1,), cp=(1,))
    top = run_search(model, cluster, space, engine=get_engine(), workers=1).top(1)
    return top[0] if top else None


def row(est: Estimate | None) -> str:
    if est is None:
        return f"{'nothing fits':<44}"
    assert est.energy_per_step is not None and est.joules_per_token is not None
    kw = est.energy_per_step.total_j / est.step_time_s / 1e3
    return (f"{est.plan.describe()[:44]:<44} {est.tokens_per_s_per_gpu:>8,.0f} {est.joules_per_token:>7.3f} "
            f"{est.time.fsdp_comm_s / est.step_time_s:>5.0%} {kw / est.num_gpus:>5.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="llama2-7b,llama2-70b")
    parser.add_argument("--cluster", default="dgx-h100-ib")
    parser.add_argument("--gpus", default="8:2048", help="LOW:HIGH, powers of two")
    parser.add_argument("--global-batch", type=int, default=2048, help="sequences per step, fixed for every count")
    args = parser.parse_args()
    low, high = (int(x) for x in args.gpus.split(":"))
    counts = [1 << k for k in range(low.bit_length() - 1, high.bit_length()) if low <= 1 << k <= high]
    start_cpu, start_wall = time.process_time(), time.perf_counter()
    head = f"{'GPUs':>5} {'layout':<44} {'tok/s/GPU':>8} {'J/tok':>7} {'fsdp':>5} {'kW/GPU':>5}"
    for name in args.models.split(","):
        print(f"\n{name} on {args.cluster}, global batch {args.global_batch} sequences (bf16, all-reduce)")
        first: dict[str, Estimate] = {}
        last: dict[str, Estimate] = {}
        for label, dp_only in (("best of every layout", False), ("data parallel only (tp = pp = cp = 1)", True)):
            print(f"  {label}\n  {head}")
            for gpus in counts:
                est = best(name, args.cluster, gpus, args.global_batch, dp_only)
                print(f"  {gpus:>5} {row(est)}")
                if est is not None:
                    first.setdefault(label, est)
                    last[label] = est
        for label, a in first.items():
            b = last[label]
            assert a.joules_per_token and b.joules_per_token
            print(f"  {label}: {a.num_gpus} -> {b.num_gpus} GPUs: tokens/s x{b.tokens_per_s / a.tokens_per_s:.2f} "
                  f"for x{b.num_gpus / a.num_gpus:g} GPUs (per GPU x{b.tokens_per_s_per_gpu / a.tokens_per_s_per_gpu:.2f}), "
                  f"J/token x{b.joules_per_token / a.joules_per_token:.2f}")
    print(f"\n{time.process_time() - start_cpu:.1f} s CPU, {time.perf_counter() - start_wall:.1f} s wall; load average "
          f"{'/'.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
