"""Regenerate the shipped traces: 300 jobs each, seed 0, offered load 0.9 on 128 GPUs of dgx-h100-ib.

Token budgets are each job's drawn duration times its speed at its requested size on that cluster (plait's planner),
so the same files on another cluster keep the work and change the durations. Run from the repository root:
``python examples/traces/make_traces.py`` (it replaces the files).
"""

from __future__ import annotations

import sys
from pathlib import Path

from plait.cli.main import run_cli

HERE = Path(__file__).parent

if __name__ == "__main__":
    for family in ("philly", "helios", "pai"):
        code = run_cli(["schedule", "--synthetic", family, "--jobs", "300", "--seed", "0", "--gpus", "128",
                        "--cluster", "dgx-h100-ib", "--write-trace", str(HERE / f"{family}-like.csv"), "--force",
                        "--json"])
        if code:
            sys.exit(code)
