"""Where `plait validate gnn`'s error lies: its epoch-time error grouped by source, loader (how batches reach the
GPU: host-CPU workers, GPU sampling, full graph, GNNLab's factored split), dataset, model and GPU count, and each
row's error (``--rows``).

Run: python benchmarks/gnn_validation_breakdown.py [--rows] [--csv FILE]
Printed per group: rows, MAPE, the signed mean error (negative: plait too fast) and the rows within 15%, all on the
epoch time (predicted over measured, minus one), as ``plait validate gnn`` reports them.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections.abc import Callable
from pathlib import Path

import plait
from plait.workloads.gnn.validate import validate_gnn

WITHIN_PCT = 15.0
"""The target's band: |error| <= 15% (docs/status.md)."""
GROUPS: dict[str, Callable[[dict[str, str]], str]] = {
    "source": lambda row: row["source_id"], "loader": lambda row: row["loader"],
    "dataset": lambda row: row["dataset"], "model": lambda row: row["model"], "gpus": lambda row: row["gpus"]}


def summary(errors: list[float]) -> str:
    """Rows, MAPE, signed mean and rows within the band of ``errors`` (percent)."""
    return (f"n={len(errors):2d}  MAPE {statistics.mean(abs(e) for e in errors):5.1f}%  "
            f"signed {statistics.mean(errors):+6.1f}%  within {WITHIN_PCT:.0f}%: {sum(abs(e) <= WITHIN_PCT for e in errors)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, default=Path(plait.__file__).parent / "validate/data/gnn_epochs.csv")
    parser.add_argument("--rows", action="store_true", help="also print every predicted row's error")
    parser.add_argument("--worst", type=int, default=0, metavar="N", help="also print the N rows of largest |error|")
    args = parser.parse_args()
    with args.csv.open(newline="") as f:
        rows = list(csv.DictReader(f))
    results = validate_gnn(args.csv)
    pairs = [(row, r.error_pct) for row, r in zip(rows, results, strict=True) if r.error_pct is not None]
    print(f"all: {summary([e for _, e in pairs])}")
    print(f"without FGNN: {summary([e for row, e in pairs if row['loader'] != 'gnnlab-factored'])}")
    for name, key in GROUPS.items():
        print(f"by {name}:")
        groups: dict[str, list[float]] = {}
        for row, error in pairs:
            groups.setdefault(key(row), []).append(error)
        for value in sorted(groups):
            print(f"  {value:24s} {summary(groups[value])}")
    if args.rows:
        for row, error in pairs:
            print(_line(row, error))
    if args.worst:
        print(f"worst {args.worst}:")
        for row, error in sorted(pairs, key=lambda pair: -abs(pair[1]))[: args.worst]:
            print(_line(row, error))


def _line(row: dict[str, str], error: float) -> str:
    return (f"{row['source_id']:17s} {row['loader']:20s} {row['dataset']:16s} {row['model']:9s} "
            f"x{row['gpus']:>2s} {error:+7.1f}%")


if __name__ == "__main__":
    main()
