"""Planner vs published layouts on the dev set ("plan quality").

Run: python benchmarks/plan_quality.py
For every run with a complete published layout, prints the predicted speed-up of the
planner's best plan over the published layout, and summarises the >10% cases by what the
planner changed. (The no-worse property itself is a test: tests/test_plan_quality.py.)
"""

from __future__ import annotations

from collections import Counter

from plait.validate.datasets import dataset_path
from plait.validate.plan_quality import compare, complete
from plait.validate.runs import read_runs

DEV = dataset_path("dev")


def changes(published, planned) -> list[str]:  # type: ignore[no-untyped-def]
    """Which knobs the planner moved."""
    out = []
    if planned.recompute != published.recompute:
        out.append(f"recompute {published.recompute}->{planned.recompute}")
    if planned.tp != published.tp:
        out.append("tp " + ("down" if planned.tp < published.tp else "up"))
    if planned.cp != published.cp:
        out.append("cp " + ("up" if planned.cp > published.cp else "down"))
    if planned.pp != published.pp:
        out.append("pp " + ("up" if planned.pp > published.pp else "down"))
    if planned.pp > 1 and planned.schedule != published.schedule:
        out.append(f"schedule -> {planned.schedule}")
    if planned.sharding != published.sharding:
        out.append(f"sharding {published.sharding}->{planned.sharding}")
    if planned.micro_batch < published.micro_batch:
        out.append("smaller micro-batch")
    if planned.offload_optimizer and not published.offload_optimizer:
        out.append("optimizer offload")
    return out or ["same knobs"]


def main() -> None:
    rows = [r for r in read_runs(DEV) if complete(r)]
    cases = [c for c in (compare(r) for r in rows) if c is not None]
    worse = [c for c in cases if c.gain < 1 - 1e-9]
    big = [c for c in cases if c.gain > 1.10]
    print(f"{len(rows)} runs with a complete layout, {len(cases)} comparable "
          f"(published layout fits plait's memory model); planner worse on {len(worse)}")
    print(f"planner predicts > 10% faster on {len(big)}; by source: {dict(Counter(c.row.source for c in big))}")
    moves = Counter(m for c in big for m in changes(c.published.plan, c.planned.plan))
    print("what the planner changes in those cases:")
    for move, count in moves.most_common():
        print(f"  {count:3d}  {move}")
    print("largest predicted gains:")
    for c in sorted(big, key=lambda c: -c.gain)[:12]:
        print(f"  {c.gain:5.2f}x {c.row.id}: {c.published.plan.describe()}  ->  {c.planned.plan.describe()}")


if __name__ == "__main__":
    main()
