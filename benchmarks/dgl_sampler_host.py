"""The host's Python and C++ time per sampled hop of DGL's neighbour sampler, outside its CUDA calls.

DGL's GPU sampler runs each hop as ``sample_neighbors`` then ``to_block`` (``BlockSampler.sample_blocks``,
``python/dgl/dataloading/dataloader.py`` at DGL 0.7.1 lines 320-349): Python that builds the frontier and the
block as graph objects, their node and edge frames and ``dgl.NID``/``dgl.EID`` columns, and one C API call each
(``_CAPI_DGLSampleNeighbors``, ``_CAPI_DGLToBlock``). On a GPU those C++ calls issue CUDA work and wait on two
counts (:mod:`plait.workloads.gnn.dgl_gpu_sampler` counts them); everything else is host time that does not depend
on the device. This script times that rest on the CPU build of DGL: ``NeighborSampler(fanouts).sample_blocks`` on a
small random graph with a few seeds, so that the sampling work itself is a few hundred edges, and the training
loops' ``block.int()`` per block (GNNLab's and Quiver's scripts: ``[block.int().to(device) for block in blocks]``).
Several seed counts separate the fixed part (the least-squares intercept at no edge drawn) from what grows with the
edges drawn on the CPU (the CPU kernels' work, which a GPU run replaces by its device work).

CPU time (``time.process_time``; one torch and one OpenMP thread) is reported beside wall time, with the load
average: on a shared machine the wall time holds other processes' turns. Prints the median of ``--repeats`` runs of
``--batches`` batches each.

Needs DGL's CPU wheel and its imports (``pip install --no-deps dgl==2.1.0 scipy networkx psutil``; 2.1.0 is the
newest DGL on PyPI for Python 3.11). Its Python layer is newer than the 0.7.1 that the validated rows ran, with the
same per-hop structure (a frontier graph, a block, their frames and id columns). DGL 2.1's import loads its GraphBolt
library built for the installed torch, which it ships only for torch 2.0-2.2; GraphBolt is not used here, so an
empty ``dgl.graphbolt`` module stands in for it (:func:`_import_dgl`).

    OMP_NUM_THREADS=1 python benchmarks/dgl_sampler_host.py [--repeats 7] [--batches 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import types

import torch

FANOUTS = [5, 10, 15]
"""The validated rows' fanouts in DGL's order (input layer first: GNNLab's GCN and Quiver's GraphSAGE)."""
SEEDS = (1, 2, 4, 8, 16)
"""Seed counts timed: few enough that the CPU's sampling work stays small beside the fixed part, which the
least-squares line's intercept (at no edge drawn) estimates."""


def _time(fn, batches: int, repeats: int) -> tuple[float, float]:
    """Median CPU and wall seconds of one call of ``fn`` over ``repeats`` runs of ``batches`` calls."""
    cpu, wall = [], []
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(batches):
            fn()
        cpu.append((time.process_time() - c0) / batches)
        wall.append((time.perf_counter() - w0) / batches)
    return statistics.median(cpu), statistics.median(wall)


def _import_dgl() -> types.ModuleType:
    """DGL's CPU wheel (an optional dependency of this script only), its GraphBolt package stubbed (module
    docstring): ``dgl.distributed`` imports it, nothing timed here uses it."""
    sys.modules.setdefault("dgl.graphbolt", types.ModuleType("dgl.graphbolt"))
    import dgl

    return dgl


def _at_least_one(text: str) -> int:
    """An argparse type: an integer >= 1 (argparse prints the one-line error and exits 2 otherwise)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be an integer >= 1")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=_at_least_one, default=7)
    parser.add_argument("--batches", type=_at_least_one, default=200)
    parser.add_argument("--nodes", type=_at_least_one, default=100_000)
    parser.add_argument("--degree", type=_at_least_one, default=20)
    args = parser.parse_args()
    try:
        dgl = _import_dgl()
    except ImportError as e:
        parser.error(f"needs DGL's CPU wheel ({e}): pip install --no-deps dgl==2.1.0 scipy networkx psutil")
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    edges = args.nodes * args.degree
    g = dgl.graph((torch.randint(args.nodes, (edges,), generator=gen),
                   torch.randint(args.nodes, (edges,), generator=gen)), num_nodes=args.nodes)
    g = g.formats(["csc"])  # Quiver's script keeps only the CSC (g.formats(['csc']))
    sampler = dgl.dataloading.NeighborSampler(FANOUTS)
    print(f"dgl {dgl.__version__}, torch {torch.__version__}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, "
          f"load average {os.getloadavg()[0]:.1f}")
    hops = len(FANOUTS)
    points = []
    for seeds in SEEDS:
        ids = torch.randperm(args.nodes, generator=gen)[:seeds]
        cpu, wall = _time(lambda ids=ids: sampler.sample_blocks(g, ids), args.batches, args.repeats)
        _, _, blocks = sampler.sample_blocks(g, ids)
        drawn = sum(b.num_edges() for b in blocks) / hops
        points.append((drawn, cpu / hops))
        print(f"sample_blocks, {seeds:2d} seeds ({drawn:7.0f} edges drawn a hop): "
              f"{cpu / hops * 1e6:7.1f} us CPU a hop, {wall / hops * 1e6:7.1f} us wall")
        cpu, wall = _time(lambda blocks=blocks: [b.int() for b in blocks], args.batches, args.repeats)
        print(f"  block.int(): {cpu / hops * 1e6:5.1f} us CPU a block, {wall / hops * 1e6:5.1f} us wall")
    slope, fixed = _fit(points)
    print(f"least squares over the seed counts: {fixed * 1e6:.1f} us a hop fixed + {slope * 1e9:.1f} ns an edge drawn "
          "(CPU time)")


def _fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Slope and intercept of the least-squares line through ``points``."""
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return slope, my - slope * mx


if __name__ == "__main__":
    main()
