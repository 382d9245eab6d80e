"""Hostile inputs through every command (tests/hostile.py): the count of cases per command and outcome (success,
one-line error, traceback, hang, nonsense), every failure with its command line, and the slowest cases.

Run: PYTHONPATH=src python benchmarks/fuzz_inputs.py [--quick] [--family NAME] [--show-errors]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.hostile import FAILURES, all_cases, run, table, warm_up


def _shown(argv: tuple[str, ...]) -> str:
    return " ".join(a if len(a) <= 50 else f"{a[:30]}...({len(a)} chars)" for a in argv)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", help="only the cases of this family (e.g. 'validator CSV')")
    parser.add_argument("--quick", action="store_true", help="the quick tier's selection (tests/test_fuzz_hostile.py)")
    parser.add_argument("--show-errors", action="store_true", help="print each distinct one-line error")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        here = os.getcwd()
        os.chdir(folder)  # what a command writes by default lands here
        try:
            if not args.quick:
                warm_up(Path(folder))
            cases = [c for c in all_cases(Path(folder), quick=args.quick) if args.family in (None, c.family)]
            outcomes = [run(case) for case in cases]
        finally:
            os.chdir(here)
    print(table(outcomes))
    families, seconds = Counter(o.case.family for o in outcomes), Counter()
    for o in outcomes:
        seconds[o.case.family] += o.seconds
    print("\ncases per family: " + ", ".join(f"{f} {n} ({seconds[f]:.0f} s)" for f, n in families.items()))
    for o in outcomes:
        if o.outcome in FAILURES:
            print(f"\n{o.outcome.upper()} ({o.seconds:.1f} s): plait {_shown(o.case.argv)}\n  {o.detail}")
    print("\nslowest cases:")
    for o in sorted(outcomes, key=lambda o: -o.seconds)[:5]:
        print(f"  {o.seconds:5.2f} s  {o.outcome:15s} plait {_shown(o.case.argv)}")
    if args.show_errors:
        for detail in sorted({o.detail for o in outcomes if o.outcome == "one-line error"}):
            print(f"  {detail}")


if __name__ == "__main__":
    main()
