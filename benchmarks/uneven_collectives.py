"""What one layout of benchmarks/uneven_vs_predict.py issues per step, per rank: every ``torch.distributed``
collective (kind, bytes, seconds inside it) and the slowed rank's stretches of compute and sleeps.

Run: python benchmarks/uneven_collectives.py ["zero3 12+4"] [--steps 8]

The ranks run with a ``sitecustomize`` (written to a temporary folder put first on ``PYTHONPATH``) that wraps
``torch.distributed``'s collectives and :class:`plait.run.slowdown.Clock`'s ``start``/``tick`` and appends one
JSON line per call to a file per rank; nothing in plait changes. Steps end at the logged loss's all-reduce (one
8-byte tensor). Printed per rank, medians over the steps after the first: the calls and payload bytes by kind
(input plus output tensors, as handed to ``torch.distributed``), the seconds inside collectives (waiting for the
peer included), and on the slowed rank the wall and thread-CPU seconds of its stretches and the sleep they asked
for.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import uneven_vs_predict as bench  # noqa: E402

HOOK = '''
import functools, json, os, time
_file = None
def _out():
    global _file
    if _file is None:
        _file = open(f"{os.environ['UNEVEN_LOG']}.{os.environ.get('RANK', '0')}.jsonl", "w", buffering=1)
    return _file
import torch.distributed as dist
def _wrap(name):
    original = getattr(dist, name, None)
    if original is None:
        return
    @functools.wraps(original)
    def wrapped(*args, **kwargs):
        tensors = [x for x in (*args, *kwargs.values()) if hasattr(x, "element_size")]
        start = time.perf_counter()
        out = original(*args, **kwargs)
        _out().write(json.dumps({"op": name, "bytes": sum(t.numel() * t.element_size() for t in tensors),
                                 "s": time.perf_counter() - start}) + "\\n")
        return out
    setattr(dist, name, wrapped)
for _name in ("all_reduce", "all_gather_single", "all_gather_into_tensor", "reduce_scatter_single",
              "reduce_scatter_tensor", "broadcast", "barrier"):
    _wrap(_name)
import plait.run.slowdown as _slow
_start, _tick = _slow.Clock.start, _slow.Clock.tick
def start(self):
    self._cpu0 = time.thread_time()
    _start(self)
def tick(self):
    stretch, cpu, slept = time.perf_counter() - self._start_s, time.thread_time() - getattr(self, "_cpu0", 0.0), self.slept_s
    _tick(self)
    self._cpu0 = time.thread_time()
    _out().write(json.dumps({"op": "tick", "s": stretch, "cpu": cpu, "sleep": self.slept_s - slept}) + "\\n")
_slow.Clock.start, _slow.Clock.tick = start, tick
'''


def summary(path: Path) -> str:
    """One rank's medians per step (module docstring)."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    ends = [i for i, e in enumerate(rows) if e["op"] == "all_reduce" and e["bytes"] <= 16]
    steps = [rows[a + 1:b + 1] for a, b in zip(ends[1:-1], ends[2:])]  # after the first step
    median = lambda values: statistics.median(values) if values else 0.0  # noqa: E731
    kinds = collections.Counter(e["op"] for e in steps[0] if e["op"] != "tick")
    text = [f"{len(steps)} steps; a step: " + ", ".join(
        f"{n} x {op} ({median([sum(e['bytes'] for e in s if e['op'] == op) for s in steps]) / 1e6:.2f} MB)"
        for op, n in sorted(kinds.items()))]
    text.append(f"  inside collectives {median([sum(e['s'] for e in s if e['op'] != 'tick') for s in steps]):.3f} s")
    if any(e["op"] == "tick" for e in steps[0]):
        text.append(f"  stretches {median([sum(e['s'] for e in s if e['op'] == 'tick') for s in steps]):.3f} s wall, "
                    f"{median([sum(e['cpu'] for e in s if e['op'] == 'tick') for s in steps]):.3f} s thread CPU, "
                    f"sleep {median([sum(e['sleep'] for e in s if e['op'] == 'tick') for s in steps]):.3f} s")
    return "\n".join(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("layout", nargs="?", default="zero3 12+4", choices=[c.name for c in bench.CASES])
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    case = next(c for c in bench.CASES if c.name == args.layout)
    tmp = Path(tempfile.mkdtemp())
    (tmp / "sitecustomize.py").write_text(HOOK)
    plan_file, log = tmp / "plan.toml", tmp / "calls"
    plan_file.write_text(f'[job]\nmodel = "{bench.MODEL}"\n[plan]\n{case.body}\n')
    env = dict(os.environ, UNEVEN_LOG=str(log), PYTHONPATH=os.pathsep.join(filter(None, (str(tmp), os.environ.get(
        "PYTHONPATH")))))
    load = os.getloadavg()[0]
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m",
                    "plait.run.worker", "--plan", str(plan_file), "--steps", str(args.steps),
                    *bench.uneven_argv(case.uneven), *bench.FULL_PRECISION], check=True, capture_output=True, env=env)
    print(f"{case.name}, rank 1 slowed {bench.SLOWDOWN:g}x where slowed; load {load:.1f} -> {os.getloadavg()[0]:.1f}")
    for rank in (0, 1):
        print(f"rank {rank}: {summary(Path(f'{log}.{rank}.jsonl'))}")


if __name__ == "__main__":
    main()
