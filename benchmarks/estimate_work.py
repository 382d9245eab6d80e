"""How much Python one cold estimate runs: bytecodes executed and Python calls, per plan (a count, not a time).

Run: python benchmarks/estimate_work.py [--base OTHER_CHECKOUT] [--warm N] [--calculon]
For the plans of ``benchmarks/estimate_speed.py``, estimates each once, empties what estimates keep (its
``empty_kept``: a plan seen first) and counts, under ``sys.settrace`` with opcode events, the bytecodes and the
Python-level calls of one more estimate. ``--warm N``: the plan estimated ``N`` times and the next estimate
counted with everything kept (a plan estimated again, as ``benchmarks/estimate_speed.py`` and
``benchmarks/vs_calculon.py`` time it; a small pipeline's sweep is written out only once its shape has been swept
128 times, :mod:`plait.simulate.straight`); ``--calculon``: ``benchmarks/vs_calculon.py``'s plans too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from estimate_speed import CASES, empty_kept
warm, calculon = int(sys.argv[2]), sys.argv[3] == "1"
if calculon:
    from vs_calculon import CASES as MORE, PLAIT_CLUSTER
    CASES = [*CASES, *((k.plait_model, PLAIT_CLUSTER, k.plan) for k in MORE)]
from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.predict.estimate import estimate
from plait.workload.catalog import get_model
counts = [0, 0]
def trace(frame, event, arg):
    if event == "call":
        counts[1] += 1
        frame.f_trace_opcodes = True
    elif event == "opcode":
        counts[0] += 1
    return trace
out = []
for model, cluster, plan in CASES:
    m, c, engine = get_model(model), get_cluster(cluster), get_engine()
    for _ in range(max(warm, 1)):
        estimate(m, c, plan, engine=engine).step_time_interval_s
    if not warm:
        empty_kept()
    counts[:] = [0, 0]
    sys.settrace(trace)
    estimate(m, c, plan, engine=engine).step_time_interval_s
    sys.settrace(None)
    out.append([model + " / " + plan.describe(), *counts])
print(json.dumps(out))
"""


def _count(tree: Path, warm: int, calculon: bool) -> list[list]:  # type: ignore[type-arg]
    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
    probe = [sys.executable, "-c", PROBE, str(tree / "benchmarks"), str(warm), str(int(calculon))]
    done = subprocess.run(probe, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="another checkout to count the same way (its src/ is used)")
    parser.add_argument("--warm", type=int, default=0, help="estimates before the counted one, nothing emptied")
    parser.add_argument("--calculon", action="store_true", help="benchmarks/vs_calculon.py's plans too")
    args = parser.parse_args()
    now = _count(ROOT, args.warm, args.calculon)
    base = _count(args.base, args.warm, args.calculon) if args.base else None
    print(f"{'case':45s} {'bytecodes':>10s} {'calls':>7s}" + ("   now/base bytecodes, calls" if base else ""))
    for i, (label, ops, calls) in enumerate(now):
        ratio = f"   {ops / base[i][1]:.3f} {calls / base[i][2]:.3f}" if base else ""
        print(f"{label[:45]:45s} {ops:10,d} {calls:7,d}{ratio}")
    total = sum(r[1] for r in now), sum(r[2] for r in now)
    ratio = ""
    if base:
        ratio = f"   {total[0] / sum(r[1] for r in base):.3f} {total[1] / sum(r[2] for r in base):.3f}"
    counted = f"estimate after {args.warm}" if args.warm else "cold estimate"
    print(f"{'all plans':45s} {total[0]:10,d} {total[1]:7,d}{ratio}  (one {counted} each)")


if __name__ == "__main__":
    main()
