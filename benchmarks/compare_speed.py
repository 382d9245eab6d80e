"""Speed of one estimate against an earlier version of plait, side by side in one run.

Run: git worktree add /tmp/base <commit>; python benchmarks/compare_speed.py --base /tmp/base [--rounds 5] [--cold]

Times the cases of ``benchmarks/estimate_speed.py`` in separate processes, this checkout and the base one
alternating (A B A B ...), so a slow spell of a shared machine falls on both; prints each case's median
milliseconds per estimate over the rounds for both, of the thread's CPU time (``time.thread_time``) and of wall-clock
time, the ratio now/base of each (below 1: faster now), whether the two trees' estimates are the same to the bit (the
repr of the time and memory breakdowns, the interval and the warnings) and the machine's load average
(``os.getloadavg``). ``--cold`` empties what estimates keep before every timed estimate, with each tree's own
``empty_kept`` of ``benchmarks/estimate_speed.py`` (a plan seen first, as ``estimate_speed.py --cold``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import json, statistics, sys, time
from plait.plan.plan import Plan
CASES = [(m, c, Plan(**fields)) for m, c, fields in json.loads(sys.argv[1])]
if sys.argv[2] == "cold":  # this tree's own list of what estimates keep
    sys.path.insert(0, sys.argv[3])
    from estimate_speed import empty_kept
else:
    def empty_kept(): pass
import inspect
try:
    from plait.predict.estimate import estimate
except ImportError:  # versions before the predict layer
    from plait.cost.step import estimate
if "engine" in inspect.signature(estimate).parameters:  # the default engine, named where estimate takes one
    from plait.engine.catalog import get_engine
    ENGINE = {"engine": get_engine()}
else:  # versions before engines
    ENGINE = {}
from plait.hardware.catalog import get_cluster
from plait.workload.catalog import get_model
out = []
for model, cluster, plan in CASES:
    m, c = get_model(model), get_cluster(cluster)
    for _ in range(20):
        estimate(m, c, plan, **ENGINE)
    cpu, wall = [], []
    for _ in range(100):
        empty_kept()
        start, start_cpu = time.perf_counter(), time.thread_time()
        estimate(m, c, plan, **ENGINE)
        cpu.append(time.thread_time() - start_cpu)
        wall.append(time.perf_counter() - start)
    est = estimate(m, c, plan, **ENGINE)
    interval = getattr(est, "step_time_interval_s", None)
    out.append([statistics.median(cpu) * 1e3, statistics.median(wall) * 1e3,
                repr((est.time, est.memory, interval, est.warnings))])
print(json.dumps(out))
"""


def _run(tree: Path, cases: str, cold: bool) -> list[list[float]]:
    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
    argv = [sys.executable, "-c", PROBE, cases, "cold" if cold else "warm", str(tree / "benchmarks")]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def _cases_json() -> str:
    """estimate_speed's cases as (model, cluster, the plan's non-default fields), readable by either version."""
    from dataclasses import fields

    from estimate_speed import CASES

    from plait.plan.plan import Plan

    default = Plan()
    return json.dumps([(m, c, {f.name: getattr(p, f.name) for f in fields(Plan)
                               if getattr(p, f.name) != getattr(default, f.name)}) for m, c, p in CASES])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="checkout of the earlier version (its src/ is used)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cold", action="store_true", help="empty what estimates keep before every estimate")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from estimate_speed import CASES
    from machine_load import load_average

    cases = _cases_json()
    load_before = load_average()
    now: list[list[list[float]]] = []
    base: list[list[list[float]]] = []
    for _ in range(args.rounds):
        now.append(_run(ROOT, cases, args.cold))
        base.append(_run(args.base, cases, args.cold))
    print(f"{'case':45s} {'base CPU':>9s} {'now CPU':>8s} {'now/base':>8s} {'base wall':>9s} {'now wall':>8s} "
          f"{'now/base':>8s}")
    ratios = []
    same = all(n[i][2] == b[i][2] for n, b in zip(now, base, strict=True) for i in range(len(CASES)))
    for i, (model, _, plan) in enumerate(CASES):
        (b, n), (bw, nw) = ([statistics.median(r[i][k] for r in runs) for runs in (base, now)] for k in (0, 1))
        ratios.append(n / b)
        print(f"{(model + ' / ' + plan.describe())[:45]:45s} {b:9.3f} {n:8.3f} {n / b:8.3f} {bw:9.3f} {nw:8.3f} "
              f"{nw / bw:8.3f}")
    print(f"estimates the same to the bit in both trees: {'yes' if same else 'NO'}")
    print(f"worst CPU ratio now/base {max(ratios):.3f}; median {statistics.median(ratios):.3f} "
          f"({args.rounds} alternating rounds of 100 {'cold ' if args.cold else ''}estimates per case; ms per "
          f"estimate); load average (1, 5, 15 min) {load_before} before, {load_average()} after")


if __name__ == "__main__":
    main()
