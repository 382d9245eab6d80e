"""Where activation swapping wins: the planner's best plan with swapping in its space and without it.

Run: python benchmarks/swap_activations.py [--engine megatron-core] [--workers 1] [--rounds 3]

For each case (model, cluster, GPUs, global batch) prints the best plan of the default space (which tries a
swapping twin of every candidate that does not fit without recomputation, :func:`plait.search.parts.swap_twins`)
and of the same space without swapping, their predicted tokens/s, and the wall and CPU seconds of both searches
(medians of ``--rounds``, run alternately) with the candidates each gave a verdict (the twins' cost to the search),
and the machine's load average before and after.
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
from plait.search.runner import SearchResult, run_search
from plait.search.space import default_space
from plait.workload.catalog import get_model

CASES = (("llama3-70b", "dgx-a100-ib", 64, 128), ("llama3-8b", "dgx-h100-ib", 8, 64),
         ("llama3-70b", "dgx-h100-ib", 64, 512))


def _best(result: SearchResult) -> tuple[float, str]:
    if not result.ranking():
        return 0.0, "(nothing fits)"
    tokens, chunk, row = result.ranking()[0]
    return tokens, result.feasible[chunk][0].plan(row).describe()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="megatron-core")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3, help="searches of each space; the medians are shown")
    args = parser.parse_args()
    engine = get_engine(args.engine)
    load_before = load_average()
    for name, cluster_name, gpus, batch in CASES:
        model, cluster = get_model(name), get_cluster(cluster_name)
        space = default_space(model, cluster, gpus, (batch,))
        results: dict[str, SearchResult] = {}
        times: dict[str, list[tuple[float, float]]] = {"with": [], "without": []}
        for _ in range(args.rounds):  # alternating: a loaded machine slows both alike
            for label, searched in (("with", space), ("without", replace(space, swap_activations=False))):
                wall, cpu = time.perf_counter(), time.process_time()
                results[label] = run_search(model, cluster, searched, engine=engine, workers=args.workers)
                times[label].append((time.perf_counter() - wall, time.process_time() - cpu))
        print(f"{name} on {gpus} GPUs of {cluster_name}, global batch {batch}, {engine.spec}:")
        runs = {label: (results[label], statistics.median(w for w, _ in times[label]),
                        statistics.median(c for _, c in times[label])) for label in results}
        for label, (result, wall, cpu) in runs.items():
            tokens, plan = _best(result)
            print(f"  {label:>7} swapping: {tokens:>12,.0f} tokens/s  {plan}  "
                  f"({result.num_candidates:,} candidates, {result.costed:,} costed, {wall:.2f} s wall, {cpu:.2f} s CPU)")
        gain = _best(runs["with"][0])[0] / max(_best(runs["without"][0])[0], 1e-9) - 1
        print(f"  swapping gains {100 * gain:+.1f}%")
    print(f"medians of {args.rounds}; load average (1, 5, 15 min) {load_before} before, {load_average()} after")


if __name__ == "__main__":
    main()
