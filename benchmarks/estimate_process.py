"""How long ``plait estimate`` takes as a whole process (target: <= 0.3 s), optionally beside another tree.

Run: python benchmarks/estimate_process.py [--base OTHER_CHECKOUT] [--runs 9] [--json] [--instructions]

Runs ``python -m plait estimate`` (the default model and cluster) ``--runs`` times with this checkout's ``src`` first
on ``PYTHONPATH``, alternating with ``--base``'s when given, after one untimed run each so that bytecode and the
parsed catalogs are cached (``PYTHONDONTWRITEBYTECODE`` is cleared for these processes: it would keep both from
being written). Prints per tree the median CPU time (user + system of the child process) and wall time, and the
machine's load average before and after. ``--json`` times ``plait estimate --json`` instead. ``--instructions``
counts instead the instructions of one process per tree under valgrind's callgrind (hash seed fixed), a figure that
does not move with the machine's load (valgrind must be installed).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

# a sibling script (run as python benchmarks/<name>.py)
from machine_load import load_average

ROOT = Path(__file__).resolve().parents[1]


def _env(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": str(tree / "src")}


def _once(tree: Path, extra: list[str]) -> tuple[float, float]:
    """(CPU, wall) seconds of one ``plait estimate`` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "plait", "estimate", *extra], env=_env(tree), capture_output=True,
                   check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, wall


def _instructions(tree: Path, extra: list[str]) -> int:
    """Instructions one ``plait estimate`` process executes, counted by callgrind."""
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-m", "plait",
               "estimate", *extra]
    done = subprocess.run(command, env={**_env(tree), "PYTHONHASHSEED": "0"}, capture_output=True, text=True,
                          check=True)
    return int(re.search(r"Collected : (\d+)", done.stderr).group(1))  # type: ignore[union-attr]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="another checkout, timed alternately (its src/ is used)")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--json", action="store_true", help="time `plait estimate --json`")
    parser.add_argument("--instructions", action="store_true", help="count instructions under callgrind instead")
    args = parser.parse_args()
    extra = ["--json"] if args.json else []
    trees = [ROOT] + ([args.base.resolve()] if args.base else [])
    for tree in trees:  # caches written
        _once(tree, extra)
    if args.instructions:
        if shutil.which("valgrind") is None:
            sys.exit("--instructions needs valgrind on the PATH (Debian: apt-get install valgrind)")
        for tree in trees:
            print(f"{str(tree):40s} {_instructions(tree, extra):,} instructions")
        return
    load_before = load_average()
    samples: dict[Path, list[tuple[float, float]]] = {tree: [] for tree in trees}
    for _ in range(args.runs):
        for tree in trees:
            samples[tree].append(_once(tree, extra))
    for tree, runs in samples.items():
        print(f"{str(tree):40s} CPU median {statistics.median(c for c, _ in runs):.3f} s, wall median "
              f"{statistics.median(w for _, w in runs):.3f} s ({args.runs} runs)")
    print(f"load average (1, 5, 15 min) {load_before} before, {load_average()} after")


if __name__ == "__main__":
    main()
