"""The planner's refinement against its search in machine instructions, counted by valgrind (load-free, unlike
``benchmarks/plan_speed.py``'s CPU times on a shared machine).

Run: python benchmarks/refine_instructions.py [--gpus 64,256] [--base OTHER_CHECKOUT] [--rounds 20]
Per GPU count it runs three processes under ``valgrind --tool=cachegrind --cache-sim=no`` (address randomisation
off, ``PYTHONHASHSEED=0``, the garbage collector off), each searching ``plan_speed.py``'s space (Llama 3.1 405B on
H100, ``plait plan``'s default space, one worker process) and refining its top 5 once (``SearchResult.top(5)``:
what a process finds once per pipeline shape, its sweep orders, is found there), then: nothing more; ``--rounds``
more refinements of that search's plans (its ranking dropped first, as a fresh search has none); a quarter as many
more searches. The differences over the rounds are one refinement's and one search's instructions, as
``plan_speed.py``'s medians take them (after a process's first plans of a shape), and their ratio the share it
targets (<= 20%; instructions weigh the refinement's interpreted loops more than the search's array work: at
64 GPUs 21.2% of the search in instructions against 19-20% of its CPU time at load 2.9, docs/planner.md). Start-up varies by some 10M instructions between
processes (about 0.3% of 20 refinements at 64 GPUs). Takes several minutes a tree; needs ``valgrind`` and
``setarch`` on the PATH.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

# a sibling script (run as python benchmarks/<name>.py)
from valgrind_count import CACHEGRIND, INSTRUCTIONS, valgrind_count

ROOT = Path(__file__).resolve().parent.parent
PROBE = """
import gc
import sys
sys.path.insert(0, sys.argv[1])
from plan_speed import TOP, cluster_for
from plait.engine.catalog import get_engine
from plait.plan.convergence import searched_specs
from plait.search.runner import run_search
from plait.search.space import default_space
from plait.sync import ALLREDUCE
from plait.workload.catalog import get_model
gpus, what, rounds = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
model, cluster, engine = get_model("llama3.1-405b"), cluster_for(gpus), get_engine()
syncs = tuple(dict.fromkeys([ALLREDUCE, *searched_specs()]))
space = default_space(model, cluster, gpus, (2048,), dp_syncs=syncs, param_servers=True)
gc.disable()
result = run_search(model, cluster, space, workers=1, engine=engine)
result.top(TOP)
for _ in range(rounds):
    if what == "refine":
        result._ranking = None
        result.top(TOP)
    else:
        run_search(model, cluster, space, workers=1, engine=engine)
"""


def _instructions(tree: Path, gpus: int, what: str, rounds: int) -> int:
    """Instructions of the whole probe process in ``tree``."""
    args = [str(ROOT / "benchmarks"), str(gpus), what, str(rounds)]
    return valgrind_count(tree, CACHEGRIND, PROBE, args, INSTRUCTIONS)[0]


def shares(tree: Path, gpus: int, rounds: int) -> tuple[float, float]:
    """(instructions of one refinement, of one search) in ``tree`` at ``gpus``."""
    idle = _instructions(tree, gpus, "none", 0)
    searches = max(1, rounds // 4)
    refine = (_instructions(tree, gpus, "refine", rounds) - idle) / rounds
    search = (_instructions(tree, gpus, "search", searches) - idle) / searches
    return refine, search


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", default="64,256", help="GPU counts, comma-separated")
    parser.add_argument("--base", type=Path, help="another checkout to count the same way (its src/ is used)")
    parser.add_argument("--rounds", type=int, default=20, help="refinements counted (searches: a quarter)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("setarch") is None:
        sys.exit("needs valgrind and setarch on the PATH (Debian: apt-get install valgrind)")
    for gpus in (int(g) for g in args.gpus.split(",")):
        for name, tree in (("this", ROOT), *((("base", args.base),) if args.base else ())):
            refine, search = shares(tree, gpus, args.rounds)
            print(f"{gpus:,} GPUs, {name}: refinement {refine / 1e6:,.0f}M instructions, search {search / 1e6:,.0f}M:"
                  f" {100 * refine / search:.1f}% ({args.rounds} refinements)", flush=True)


if __name__ == "__main__":
    main()
