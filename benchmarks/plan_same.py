"""The planner's answers of two source trees side by side: ``plait plan --json`` of each case, compared exactly.

Run: python benchmarks/plan_same.py --base /path/to/other/tree [--this /path/to/this/tree] [--quick]
Each tree's ``src`` goes on ``PYTHONPATH`` of its own ``python -m plait plan ... --json`` process; the JSON
documents must be equal (every ranked plan and every predicted figure to the last bit), less the fields that
measure the run itself (``elapsed_s``, ``candidates_per_s``, the per-stage pass's ``cpu_s``). A speed change to
the search must leave them equal.
Exits 1 on any difference, naming the case and the first differing path.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

LARGE = str(Path(__file__).resolve().parent / "clusters" / "dgx-h100-ib-131k.toml")
CASES: tuple[tuple[str, ...], ...] = (
    ("--model", "llama3.1-405b", "--gpus", "16384", "--global-batch", "2048"),
    ("--model", "llama3.1-405b", "--gpus", "1024", "--global-batch", "2048"),
    ("--model", "llama3-8b", "--gpus", "64", "--global-batch", "512"),
    ("--model", "mixtral-8x7b", "--gpus", "256", "--global-batch", "1024", "--seq-len", "4096"),
    ("--model", "gpt3-175b", "--cluster", "dgx-a100-ib", "--gpus", "1024", "--global-batch", "1536", "--top", "8"),
    ("--model", "llama3-70b", "--gpus", "512", "--global-batch", "1024", "--rank-by", "p90"),
    ("--model", "llama2-7b", "--cluster", "h100-2x64-two-regions", "--gpus", "128", "--global-batch", "256"),
    ("--model", "llama3-8b", "--gpus", "8", "--global-batch", "64", "--top", "3"),
    ("--model", "llama3.1-70b", "--objective", "cost", "--gpus-range", "256:2048", "--global-batch", "1024"),
    ("--model", "llama3.1-405b", "--cluster", LARGE, "--gpus", "131072", "--global-batch", "2048"),
    ("--model", "llama3.1-405b", "--gpus", "64", "--global-batch", "256"),
)
QUICK = 3
"""Cases ``--quick`` runs (the first ones)."""
TIMING = ("elapsed_s", "candidates_per_s", "cpu_s")
"""Fields that measure the run itself, left out wherever they are (``cpu_s``: the per-stage pass's CPU time)."""


def plan_json(tree: Path, args: tuple[str, ...]) -> Any:
    """``plait plan ARGS --json`` of the tree at ``tree``, without its timing fields."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    out = subprocess.run([sys.executable, "-m", "plait", "plan", *args, "--json"], env=env, capture_output=True,
                         text=True, check=False)
    if out.returncode != 0:
        return {"exit": out.returncode, "stderr": out.stderr.strip().splitlines()[-1:]}
    return _untimed(json.loads(out.stdout))


def _untimed(doc: Any) -> Any:
    """``doc`` without its :data:`TIMING` fields, at any depth."""
    if isinstance(doc, dict):
        return {key: _untimed(value) for key, value in doc.items() if key not in TIMING}
    if isinstance(doc, list):
        return [_untimed(value) for value in doc]
    return doc


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """The first path where ``a`` and ``b`` differ (``None``: equal)."""
    if type(a) is not type(b):
        return f"{path}: {a!r} vs {b!r}"
    if isinstance(a, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return f"{path}.{key}: only in {'base' if key in a else 'this'}"
            found = first_difference(a[key], b[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} vs {len(b)} entries"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    return None if a == b else f"{path}: {a!r} vs {b!r}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the other source tree (e.g. a worktree of main)")
    parser.add_argument("--this", type=Path, default=Path(__file__).resolve().parents[1], help="this source tree")
    parser.add_argument("--quick", action="store_true", help=f"only the first {QUICK} cases")
    args = parser.parse_args()
    for tree in (args.base, args.this):
        if not (tree / "src" / "plait").is_dir():
            parser.error(f"{str(tree)!r} is not a plait source tree (no src/plait)")
    differ = 0
    for case in CASES[:QUICK] if args.quick else CASES:
        base, this = plan_json(args.base, case), plan_json(args.this, case)
        found = first_difference(base, this)
        top = this.get("top") or this.get("points") or []
        print(f"{'DIFFERENT' if found else 'same':9s} plait plan {' '.join(case)} ({len(top)} plans)"
              + (f": {found}" if found else ""), flush=True)
        differ += found is not None
    print(f"{differ} of {len(CASES[:QUICK] if args.quick else CASES)} cases differ")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
