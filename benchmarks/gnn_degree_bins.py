"""Bin a measured degree histogram of a public graph into ``src/plait/workloads/gnn/data/degree_histograms.toml``.

Input: a ``degree,frequency`` CSV (nodes per degree), as ``freq_generator.py`` of mlsys-lab-sogang/gnn-bench wrote
them for ogbn-products and ogbn-papers100M (``logs/freq_ogbn_*.csv`` at commit 27f2e5d): each node's degree counted
over PyG's ``edge_index`` (``degrees[src] += 1; degrees[dst] += 1``, ``degree_generator.py``). ogbn-products'
``edge_index`` stores each undirected edge both ways, so its counts are twice the degree (``--halve``);
ogbn-papers100M's stores each citation once, so its counts are the symmetrized degree (in plus out).

Degrees up to ``--exact`` keep a class each; above, classes are merged into geometric bins of ``2**(1/--per-octave)``
width, each written as its nodes and their mean degree, so the nodes and the edge ends (``sum d n``) are kept exactly.

    python benchmarks/gnn_degree_bins.py freq_ogbn_products.csv --halve
"""

from __future__ import annotations

import argparse
import math

import numpy as np


def bins(degrees: np.ndarray, nodes: np.ndarray, exact: int, per_octave: int) -> tuple[list[float], list[int]]:
    """Mean degree and nodes of each bin: one per degree up to ``exact``, then geometric bins above it."""
    keep = nodes > 0
    degrees, nodes = degrees[keep], nodes[keep]
    key = np.where(
        degrees <= exact, degrees, exact + 1 + np.floor(per_octave * np.log2(np.maximum(degrees, 1) / exact))
    )
    out_d, out_n = [], []
    for k in np.unique(key):
        sel = key == k
        n = int(nodes[sel].sum())
        out_d.append(float((degrees[sel] * nodes[sel]).sum() / n))
        out_n.append(n)
    return out_d, out_n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--halve", action="store_true", help="counts are twice the degree (both-way edge_index)")
    parser.add_argument("--exact", type=int, default=64)
    parser.add_argument("--per-octave", type=int, default=8)
    args = parser.parse_args()
    raw = np.loadtxt(args.csv, delimiter=",", skiprows=1, dtype=np.int64)
    degrees = raw[:, 0].astype(np.float64) / (2.0 if args.halve else 1.0)
    d, n = bins(degrees, raw[:, 1].astype(np.float64), args.exact, args.per_octave)
    ends = sum(di * ni for di, ni in zip(d, n, strict=True))
    assert math.isclose(ends, float((degrees * raw[:, 1]).sum()), rel_tol=1e-12)
    print(f"# {sum(n)} nodes, {ends / 2:.0f} undirected edges, {len(d)} classes")
    print("degrees = [" + ", ".join(f"{x:.6g}" for x in d) + "]")
    print("nodes = [" + ", ".join(str(x) for x in n) + "]")


if __name__ == "__main__":
    main()
