"""Sweep-order speed: the CPU a process spends finding the composed orders of the pipelines the planner refines.

Run: python benchmarks/order_speed.py
The planner's refinement (``plait plan``'s top 5, :mod:`plait.search.refine`) simulates deep pipelines by replaying
a short run's order (:func:`plait.simulate.periodic._composed`) and extrapolating its steady state
(:func:`plait.simulate.steady._lags`). Both are found once per (schedule, p, m, v) in a process, so a process's
first refinement pays for them (``benchmarks/plan_speed.py``'s medians leave them out). The shapes are those
the refinement of Llama 3.1 405B at global batch 2,048 (``benchmarks/plan_speed.py``) simulates at 64 and 1,024
GPUs, found by printing the shapes :func:`plait.simulate.steady.steady_sweep` is called with. Each set is timed in
this fresh process, once (a second time would find them kept).
"""

from __future__ import annotations

import time

from plait.simulate.periodic import _composed
from plait.simulate.steady import _lags

SHAPES = {
    "64 GPUs": (
        ("interleaved", 16, 1024, 6),
        ("1f1b", 16, 1024, 1),
        ("interleaved", 16, 2048, 6),
        ("interleaved", 16, 2048, 4),
        ("interleaved", 16, 2048, 3),
    ),
    "1,024 GPUs": (("1f1b", 64, 1024, 1), ("interleaved", 32, 1024, 3), ("interleaved", 32, 1024, 2)),
}
"""(schedule, stages, micro-batches, virtual stages) of each pipeline the refinement simulates."""


def main() -> None:
    for name, shapes in SHAPES.items():
        start = time.process_time()
        for shape in shapes:
            _composed(*shape)
            _lags(*shape)
        print(f"{name}: {len(shapes)} orders found in {time.process_time() - start:.3f} s CPU")


if __name__ == "__main__":
    main()
