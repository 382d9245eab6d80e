"""Machine instructions of one cold estimate, counted by valgrind (load-free, unlike a time; closer to one than
bytecodes, which weigh a C call and a tuple compare alike).

Run: python benchmarks/estimate_instructions.py [--base OTHER_CHECKOUT] [--rounds 100] [--case N]
Runs, under ``valgrind --tool=cachegrind --cache-sim=no`` (address randomisation off, ``PYTHONHASHSEED=0``), a
process that loads the models, clusters and engine of ``benchmarks/estimate_speed.py``'s plans, estimates each plan
three times, then ``--rounds`` times estimates every plan with what estimates keep emptied first (its
``empty_kept``: a plan seen first), with the garbage collector off (a collection falls where allocation counts cross
its thresholds, on another estimate in another tree: 0.5M instructions an estimate of difference for one plan
alone), and the same process without those rounds; the difference of their instruction
counts over the estimates is one cold estimate's, on average over the plans. Start-up varies by some 10M
instructions between runs, so the rounds must be many (100 rounds of 5 plans: about 0.6% of the figure), but fewer
than :data:`plait.simulate.straight.STRAIGHT_AFTER` (128): a simulated plan's sweep, swept that often, is written out
as Python once (a compile, then a cheaper sweep; not emptied by ``empty_kept``). Takes a few minutes a tree; needs
``valgrind`` on the PATH. ``--case N``: the N-th plan alone (0-based), its sweep kept in the loop however many the
rounds (the probe raises ``STRAIGHT_AFTER`` past them), so that many rounds (600: ~0.02M of noise) count one plan.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

# a sibling script (run as python benchmarks/<name>.py)
from valgrind_count import CACHEGRIND, INSTRUCTIONS, valgrind_count

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import gc
import sys
sys.path.insert(0, sys.argv[1])
from estimate_speed import CASES, empty_kept
from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.predict.estimate import estimate
from plait.workload.catalog import get_model
engine = get_engine()
runs = [(get_model(m), get_cluster(c), p) for m, c, p in CASES]
if sys.argv[3] != "all":  # one plan, its sweep never written out (the module docstring)
    import plait.simulate.straight
    plait.simulate.straight.STRAIGHT_AFTER = 1 << 40
    runs = [runs[int(sys.argv[3])]]
gc.disable()
for m, c, p in runs:
    for _ in range(3):
        estimate(m, c, p, engine=engine).step_time_interval_s
for _ in range(int(sys.argv[2])):
    for m, c, p in runs:
        empty_kept()
        estimate(m, c, p, engine=engine).step_time_interval_s
print(len(runs))
"""


def _instructions(tree: Path, rounds: int, case: str = "all") -> tuple[int, int]:
    """(instructions of the whole process, plans per round) for ``rounds`` rounds of cold estimates in ``tree`` (of
    plan ``case`` alone, unless "all")."""
    count, out = valgrind_count(tree, CACHEGRIND, PROBE, [str(tree / "benchmarks"), str(rounds), case], INSTRUCTIONS)
    return count, int(out.split()[-1])


def per_estimate(tree: Path, rounds: int, case: str = "all") -> float:
    """Instructions of one cold estimate in ``tree``, the mean over the plans (or of plan ``case``)."""
    (idle, _), (busy, plans) = _instructions(tree, 0, case), _instructions(tree, rounds, case)
    return (busy - idle) / (rounds * plans)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="another checkout to count the same way (its src/ is used)")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--case", default="all", help="the N-th plan of estimate_speed.py alone (0-based)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("setarch") is None:
        sys.exit("needs valgrind and setarch on the PATH (Debian: apt-get install valgrind)")
    now = per_estimate(ROOT, args.rounds, args.case)
    over = "mean over the plans" if args.case == "all" else f"plan {args.case}"
    line = f"one cold estimate: {now / 1e6:.3f}M instructions ({over}, {args.rounds} rounds)"
    if args.base:
        base = per_estimate(args.base, args.rounds, args.case)
        line += f"; base {base / 1e6:.3f}M; now/base {now / base:.3f}"
    print(line)


if __name__ == "__main__":
    main()
