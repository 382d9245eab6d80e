"""Where the classic data-parallel error is: ``plait validate classic`` broken down by group, and each row by component.

For every predicted row of ``plait/validate/data/classic_dp.csv`` this prints the step-time error (predicted over
measured step time, minus one: negative means plait is faster than the run) grouped by source, framework, model,
GPU, precision, GPU count and batch per GPU -- rows, MAPE, signed mean and rows within 15% --, the worst rows, and,
with ``--rows``, each row's predicted step and the share of it that is device compute, exposed host time, exposed
data-parallel communication, optimizer step and input wait. Nothing here is fitted: it reads the rows and the current
model.

Run: ``PYTHONPATH=src python benchmarks/classic_breakdown.py [--rows]`` (about a minute: every row is traced).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from typing import Any

from plait.validate.datasets import dataset_path
from plait.validate.records import read_records
from plait.workloads.traced import validate

GROUPS = ("source_id", "framework", "model", "gpu", "precision", "gpus", "batch_per_gpu")
WORST = 10
"""Rows listed by the largest absolute error (always printed)."""


def stats(errors: list[float]) -> str:
    """Rows, MAPE, signed mean and rows within 15% of ``errors`` (percent)."""
    n = len(errors)
    return (f"{n:4d} rows  MAPE {sum(map(abs, errors)) / n:5.1f}%  signed {sum(errors) / n:+6.1f}%  "
            f"within 15% {sum(abs(e) <= 15 for e in errors):3d}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", action="store_true", help="also print each row's time by component")
    args = parser.parse_args()
    seen: list[Any] = []
    spy = validate.estimate_traced

    def keep(*given: Any, **named: Any) -> Any:
        seen.append(spy(*given, **named))
        return seen[-1]

    validate.estimate_traced = keep  # the estimate each row's prediction makes, for its components
    done = []
    for row in read_records(dataset_path("classic"), "classic", validate.COLUMNS):
        seen.clear()
        result = validate.predict_row(row)
        if result.error_pct is not None:
            done.append((row, result, seen[-1].time))
    print("all" + " " * 33, stats([r.error_pct for _, r, _ in done]))
    for column in GROUPS:
        groups: dict[str, list[float]] = defaultdict(list)
        for row, result, _ in done:
            groups[row[column].split(" (")[0]].append(result.error_pct)
        print(f"by {column}")
        for key in sorted(groups, key=lambda k: (len(k), k)):
            print(f"  {key[:34]:34s}", stats(groups[key]))
    print(f"worst {WORST} rows")
    for _, result, _ in sorted(done, key=lambda d: -abs(d[1].error_pct))[:WORST]:
        print(f"  {result.source:18s} {result.label[:60]:60s} {result.error_pct:+6.1f}%")
    if args.rows:
        for _, result, time in done:
            total = time.total_s
            shares = "  ".join(f"{name} {value / total:4.2f}" for name, value in (
                ("compute", time.compute_s), ("host", time.host_s), ("dp", time.dp_comm_s),
                ("optimizer", time.optimizer_s), ("input", time.input_wait_s)))
            print(f"{result.source:18s} {result.label[:60]:60s} {result.error_pct:+6.1f}%  "
                  f"step {total * 1e3:9.1f} ms  {shares}")


if __name__ == "__main__":
    main()
