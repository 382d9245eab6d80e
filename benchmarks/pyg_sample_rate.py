"""How fast one core runs PyG's ``NeighborSampler`` hops (torch_sparse ``sample_adj``), by how many nodes the batch
has reached, on a graph of ogbn-products' size and degrees.

Run: python benchmarks/pyg_sample_rate.py [--repeats 5] [--scale 1.0]
Needs torch-sparse (``pip install --no-build-isolation torch-sparse``: it builds against the installed torch).

Builds a CSR graph with ogbn-products' nodes and measured degree histogram
(``plait/workloads/gnn/data/degree_histograms.toml``; ``--scale`` shrinks the node count, degrees kept), each node's
neighbours drawn uniformly (int64 ids, as PyG's ``SparseTensor`` holds them), then samples batches of random seeds
hop by hop as PyG 2.0's ``NeighborSampler.sample`` does (``adj_t.sample_adj(n_id, size, replace=False)`` on every
node reached so far), on one thread (a DataLoader worker's ``torch.set_num_threads(1)``). ``sample_adj`` keeps the
batch's node ids in one ``std::unordered_map`` that grows with the nodes reached (torch_sparse
``csrc/cpu/sample_cpu.cpp``: every sampled neighbour is looked up in it, and a new one inserted), so a hop's cost per
sampled edge depends on how large that map is against the caches. Printed: per batch size and fanouts (the published
runs' among them), each hop's median CPU seconds (``time.thread_time``) beside its wall seconds, its sampled edges,
the nodes reached after it (the map's size) and its CPU nanoseconds per sampled edge; then the load average before
and after.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
import tomllib
from pathlib import Path

import numpy as np
import torch

# a sibling script (run as python benchmarks/<name>.py)
from machine_load import load_average

ROOT = Path(__file__).resolve().parents[1]
HISTOGRAMS = ROOT / "src" / "plait" / "workloads" / "gnn" / "data" / "degree_histograms.toml"
CONFIGS = (
    (256, (15, 10, 5)),
    (1024, (15, 10, 5)),  # quiver-team/torch-quiver#86's reference run; SALIENT's PyG rows
    (512, (20, 20, 20)),  # SALIENT's distributed GIN rows
    (2048, (15, 10, 5)),
    (4096, (15, 10, 5)),
    (8000, (10, 25)),  # GNNLab's GraphSAGE rows
    (8000, (15, 10, 5)),  # GNNLab's GCN rows
)


def _load_sample_adj() -> None:
    """Register ``torch.ops.torch_sparse.sample_adj`` from torch-sparse's compiled library (its Python package,
    which also needs torch-scatter, is not imported)."""
    spec = importlib.util.find_spec("torch_sparse")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("needs torch-sparse: pip install --no-build-isolation torch-sparse")
    torch.ops.load_library(str(Path(next(iter(spec.submodule_search_locations))) / "_sample_cpu.so"))


def products_graph(scale: float, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(rowptr, col) of a graph with ogbn-products' degree histogram over ``scale`` of its nodes."""
    hist = tomllib.loads(HISTOGRAMS.read_text())["ogbn-products"]
    degrees = np.rint(np.asarray(hist["degrees"], dtype=np.float64)).astype(np.int64)
    counts = np.rint(np.asarray(hist["nodes"], dtype=np.float64) * scale).astype(np.int64)
    rng = np.random.default_rng(seed)
    degree = rng.permutation(np.repeat(degrees, counts))
    rowptr = np.zeros(degree.size + 1, dtype=np.int64)
    np.cumsum(degree, out=rowptr[1:])
    col = rng.integers(0, degree.size, size=int(rowptr[-1]), dtype=np.int64)
    return torch.from_numpy(rowptr), torch.from_numpy(col)


def sample_hops(rowptr: torch.Tensor, col: torch.Tensor, seeds: torch.Tensor,
                fanouts: tuple[int, ...]) -> list[tuple[float, float, int, int]]:
    """Per hop of one batch (PyG's NeighborSampler: every node reached so far draws): (CPU s, wall s, sampled
    edges, nodes reached after the hop)."""
    n_id, hops = seeds, []
    for size in fanouts:
        c0, w0 = time.thread_time(), time.perf_counter()
        _, out_col, n_id, _ = torch.ops.torch_sparse.sample_adj(rowptr, col, n_id, size, False)
        hops.append((time.thread_time() - c0, time.perf_counter() - w0, out_col.numel(), n_id.numel()))
    return hops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="batches per configuration (medians printed)")
    parser.add_argument("--scale", type=float, default=1.0, help="share of ogbn-products' nodes (degrees kept)")
    args = parser.parse_args()
    if args.repeats < 1 or not 0 < args.scale <= 1:
        parser.error(f"--repeats={args.repeats} must be >= 1 and --scale={args.scale} in (0, 1]")
    _load_sample_adj()
    torch.set_num_threads(1)
    load_before = load_average()
    rowptr, col = products_graph(args.scale)
    nodes = rowptr.numel() - 1
    print(f"graph: {nodes:,} nodes, {col.numel():,} adjacency entries (ogbn-products' degrees, uniform neighbours); "
          f"torch {torch.__version__}")
    print(f"{'batch':>6s} {'fanouts':>9s} {'hop':>3s} {'CPU s':>7s} {'wall s':>7s} {'edges':>10s} {'reached':>10s} "
          f"{'ns/edge':>8s}")
    gen = torch.Generator().manual_seed(1)
    for batch, fanouts in CONFIGS:
        runs = []
        for _ in range(args.repeats):
            seeds = torch.randperm(nodes, generator=gen)[:batch]
            runs.append(sample_hops(rowptr, col, seeds, fanouts))
        for h in range(len(fanouts)):
            cpu = statistics.median(r[h][0] for r in runs)
            wall = statistics.median(r[h][1] for r in runs)
            edges = statistics.median(r[h][2] for r in runs)
            reached = statistics.median(r[h][3] for r in runs)
            print(f"{batch:6d} {'-'.join(map(str, fanouts)):>9s} {h + 1:3d} {cpu:7.3f} {wall:7.3f} {edges:10,.0f} "
                  f"{reached:10,.0f} {cpu / edges * 1e9:8.1f}")
    print(f"medians of {args.repeats} batches; one thread; load average (1, 5, 15 min) {load_before} before, "
          f"{load_average()} after")


if __name__ == "__main__":
    main()
