"""One count of a Python probe under valgrind, shared by the instruction-counting benchmarks
(``estimate_instructions.py``, ``estimate_regions.py``, ``refine_instructions.py``): address randomisation off
(``setarch -R``) and ``PYTHONHASHSEED=0``, so that two runs of one tree execute the same instructions but for
start-up; the probe's ``src`` tree on ``PYTHONPATH``. Needs ``valgrind`` and ``setarch`` on the PATH.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path


def valgrind_count(tree: Path, tool: list[str], probe: str, args: list[str], pattern: str) -> tuple[int, str]:
    """(the integer valgrind's ``tool`` options report in its ``pattern``'s first group, commas dropped; the probe's
    standard output) for ``python -c probe *args`` run on ``tree``'s ``src``."""
    env = dict(os.environ, PYTHONPATH=str(tree / "src"), PYTHONHASHSEED="0")
    argv = ["setarch", os.uname().machine, "-R", "valgrind", *tool, sys.executable, "-c", probe, *args]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    found = re.search(pattern, done.stderr)
    assert found, done.stderr[-2000:]
    return int(found.group(1).replace(",", "")), done.stdout


CACHEGRIND = ["--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
"""Options counting every instruction of the process (cachegrind without its cache simulation)."""
INSTRUCTIONS = r"I\s+refs:\s+([\d,]+)"
"""Cachegrind's total of instructions executed."""
