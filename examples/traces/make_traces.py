"""Regenerate the shipped traces: 300 jobs each, seed 0, 128 GPUs of a100-omnipath, offered load 1.5 over the arrival
window (the GPU-seconds the jobs would hold inside it if each started on arrival, over the GPUs times the window).

Why these: published scheduler evaluations replay busy periods, where the queue builds (Tiresias, Gandiva, Themis,
Pollux and Sia all compare policies under contention); at a load under 1 nothing waits and FIFO, SRTF and LAS
coincide. a100-omnipath's 6.25 GB/s per GPU is where plait's planner predicts a job spread over nodes slower (4.6% for
Llama 3 8B on 8 GPUs), so consolidation has something to win. Token budgets are each job's drawn duration times its
speed at its requested size on that cluster (plait's planner), so the same files on another cluster keep the work and
change the durations. Run from the repository root:
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
                        "--cluster", "a100-omnipath", "--load", "1.5", "--write-trace", str(HERE / f"{family}-like.csv"),
                        "--force", "--json"])
        if code:
            sys.exit(code)
