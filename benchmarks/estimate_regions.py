"""Machine instructions of one cold estimate spent inside named functions, counted by callgrind (load-free).

Run: python benchmarks/estimate_regions.py [--case 3] [--rounds 100] [--base OTHER_CHECKOUT] [FUNCTION ...]
Runs ``benchmarks/estimate_speed.py``'s plan ``--case`` (0-based; 3: the simulated 405B pp8 1F1B plan) under
``valgrind --tool=callgrind --collect-atstart=no`` (address randomisation off, ``PYTHONHASHSEED=0``, the garbage
collector off), estimates it three times, then ``--rounds`` times with what estimates keep emptied first (its
``empty_kept``: a plan seen first; a small pipeline's sweep is never written out, as if fewer than
:data:`plait.simulate.straight.STRAIGHT_AFTER` sweeps had run) and counts only the instructions inside the estimate
(``ALL``) or inside each named function (``module:function``, e.g. ``plait.cost.batch:stage_sync``; its outermost
calls), switching callgrind's collection on and off around it through a three-line C helper compiled here
(``CALLGRIND_TOGGLE_COLLECT``, valgrind/callgrind.h). Unlike :mod:`estimate_instructions`, start-up's variation does
not enter. Each switch costs ~4,500 instructions of the wrapper around a named function, counted per call: a function
called many times reads high by that much a call (``plait.cost.batch:stage_class``, 30 calls of a dictionary
look-up, reads 0.136M). Needs ``valgrind``, its headers and ``cc``; ~30 s a function.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

# a sibling script (run as python benchmarks/<name>.py)
from valgrind_count import valgrind_count

ROOT = Path(__file__).resolve().parents[1]
HELPER = "#include <valgrind/callgrind.h>\nvoid toggle(void) { CALLGRIND_TOGGLE_COLLECT; }\n"
PROBE = """
import ctypes, gc, importlib, sys
sys.path.insert(0, sys.argv[1])
from estimate_speed import CASES, empty_kept
from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.predict.estimate import estimate
from plait.workload.catalog import get_model
import plait.simulate.straight
toggle, depth = ctypes.CDLL(sys.argv[2]).toggle, [0]
plait.simulate.straight.STRAIGHT_AFTER = 1 << 40
(m, c, p), engine = CASES[int(sys.argv[3])], get_engine()
m, c = get_model(m), get_cluster(c)
for _ in range(3):
    estimate(m, c, p, engine=engine).step_time_interval_s
def wrap(fn):
    def counted(*args, **kwargs):
        depth[0] += 1
        if depth[0] == 1:
            toggle()
        try:
            return fn(*args, **kwargs)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                toggle()
    return counted
target = sys.argv[5]
if target != "ALL":
    module, name = target.split(":")
    owner = importlib.import_module(module)
    *path, last = name.split(".")
    for part in path:
        owner = getattr(owner, part)
    original = getattr(owner, last)
    for held in [owner, *(m for n, m in list(sys.modules.items()) if n.startswith("plait"))]:
        if getattr(held, last, None) is original:
            setattr(held, last, wrap(original))
run = lambda: estimate(m, c, p, engine=engine).step_time_interval_s
run = wrap(run) if target == "ALL" else run
gc.disable()
for _ in range(int(sys.argv[4])):
    empty_kept()
    run()
"""


def collected(tree: Path, helper: Path, case: int, rounds: int, target: str) -> float:
    """Instructions a cold estimate of plan ``case`` spends inside ``target`` ("ALL": the estimate) in ``tree``."""
    tool = ["--tool=callgrind", "--collect-atstart=no", "--callgrind-out-file=/dev/null"]
    args = [str(tree / "benchmarks"), str(helper), str(case), str(rounds), target]
    count, _ = valgrind_count(tree, tool, PROBE, args, r"Collected\s*:\s*(\d+)")
    return count / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", default=["ALL"], help="module:function, or ALL (the estimate)")
    parser.add_argument("--case", type=int, default=3, help="the plan of estimate_speed.py (0-based)")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--base", type=Path, help="another checkout to count the same way (its src/ is used)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        helper = Path(folder) / "toggle.so"
        (Path(folder) / "toggle.c").write_text(HELPER)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(helper), str(Path(folder) / "toggle.c")], check=True)
        for target in args.targets:
            now = collected(ROOT, helper, args.case, args.rounds, target)
            line = f"plan {args.case} {target}: {now / 1e6:.3f}M instructions a cold estimate"
            if args.base:
                base = collected(args.base, helper, args.case, args.rounds, target)
                line += f"; base {base / 1e6:.3f}M; now/base {now / base:.3f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
