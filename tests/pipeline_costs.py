"""Random per-rank pipeline costs for the tests that compare pipeline timings (the closed sweep, the event
simulation, the refinement's lower bound)."""

from __future__ import annotations

import numpy as np

from plait.simulate.pipeline import PipelineCosts

LAYOUTS = [("gpipe", 4, 8, 1), ("gpipe", 2, 3, 1), ("zb-h1", 4, 8, 1), ("zb-h1", 4, 2, 1), ("zb-h1", 8, 16, 1)]
LAYOUTS += [("interleaved", p, m, v) for p, m, v in ((2, 4, 2), (4, 8, 2), (4, 12, 3), (8, 16, 4), (16, 32, 4))]
"""(schedule, stages, micro-batches, virtual stages) beside the 1F1B layouts each test lists."""


def random_costs(rng: np.random.Generator, schedule: str, p: int, m: int, v: int, spread: float = 0.5) -> PipelineCosts:
    """Stage forwards uniform in ``[1 - spread, 1 + spread] / v``, backwards 1.5-3x them, and random reductions."""
    forward = (rng.uniform(1 - spread, 1 + spread, p) / v).tolist()
    backward = [f * rng.uniform(1.5, 3.0) for f in forward]
    return PipelineCosts(p=p, m=m, v=v, schedule=schedule, forward_s=forward, backward_s=backward,
                         weight_grad_s=[b * rng.uniform(0.2, 0.5) for b in backward], p2p_s=float(rng.uniform(0, 0.2)),
                         grad_reduce_s=rng.uniform(0, 2, p).tolist(), param_gather_s=rng.uniform(0, 1, p).tolist(),
                         buckets=rng.integers(1, 9, p).tolist(), overlap_grad_reduce=bool(rng.integers(2)),
                         optimizer_s=rng.uniform(0, 0.1, p).tolist())
