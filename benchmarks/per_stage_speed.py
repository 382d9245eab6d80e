"""CPU time of the per-stage pass (``per_stage.cpu_s`` of ``plait plan --json``) of two source trees, side by side.

Run: python benchmarks/per_stage_speed.py --base /path/to/other/tree [--this /path/to/this/tree] [--rounds 3]
Target: the per-stage pass costs at most the uniform search's own CPU time at every scale.

Each round runs every case once per tree, alternating (this tree, then the base), each in its own
``python -m plait plan ... --json --workers 1`` process with the tree's ``src`` on ``PYTHONPATH``, so both see the
same load and neither finds the other's caches warm. Printed per case and tree: the pass's CPU seconds of every
round, and the load average (1 min) at the start and the end. That the two trees find the same plans is
benchmarks/plan_same.py's check.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

CASES: tuple[tuple[str, ...], ...] = (
    ("--model", "llama3.1-405b", "--gpus", "16384"),
    ("--model", "llama3.1-405b", "--gpus", "1024"),
    ("--model", "llama3-70b", "--cluster", "dgx-h100-ib", "--gpus", "64"),
    ("--model", "llama3.1-405b", "--cluster", "gb200-nvl72", "--gpus", "1152"),
)


def pass_cpu_s(tree: Path, case: tuple[str, ...]) -> float:
    """``per_stage.cpu_s`` of one ``plait plan`` process of ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    out = subprocess.run([sys.executable, "-m", "plait", "plan", *case, "--json", "--workers", "1"], env=env,
                         capture_output=True, text=True, check=True, cwd=tree).stdout
    return float(json.loads(out)["per_stage"]["cpu_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the other source tree")
    parser.add_argument("--this", type=Path, default=Path(__file__).resolve().parents[1], help="this source tree")
    parser.add_argument("--rounds", type=int, default=3, help="runs per case and tree")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    times: dict[tuple[int, str], list[float]] = {}
    for _ in range(args.rounds):
        for i, case in enumerate(CASES):
            for name, tree in (("this", args.this), ("base", args.base)):
                times.setdefault((i, name), []).append(pass_cpu_s(tree, case))
    print(f"load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    for i, case in enumerate(CASES):
        this, base = (" ".join(f"{s:.3f}" for s in times[i, name]) for name in ("this", "base"))
        print(f"{' '.join(case)}: this {this} s | base {base} s")


if __name__ == "__main__":
    main()
