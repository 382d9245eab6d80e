"""Fingerprints of every policy's schedule on several synthetic traces, to prove that a change to the scheduler's
speed moves no result: run it on two trees and compare the output, line by line.

Each line: trace (family, jobs, GPUs, seed), policy, and a SHA-256 of every job's status, first start, finish
(exact floats), sizes and preemptions and every allocation segment (node, GPUs, exact start and end). The traces
are drawn with plait's planner as the speed model (``synthetic_trace``), at offered load 1.5 so that the queue
builds and every policy preempts, waits or resizes. Run, for example::

    PYTHONPATH=<tree>/src python benchmarks/schedule_identical.py > <tree>.txt   # once per tree
    diff base.txt new.txt
"""

from __future__ import annotations

import hashlib

from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.schedule.policies import POLICY_NAMES, make_policy
from plait.schedule.pool import Pool
from plait.schedule.result import ScheduleResult
from plait.schedule.simulate import simulate
from plait.schedule.speed import SpeedModel
from plait.schedule.synthetic import synthetic_trace

CLUSTER = "dgx-h100-ib"
TRACES = (("helios", 3000, 1024, 0), ("helios", 2000, 256, 1), ("philly", 3000, 512, 2), ("pai", 2000, 256, 3),
          ("pai", 400, 64, 4))
"""(family, jobs, GPUs, seed): large enough that thousands of jobs run and wait at once, small enough to run in a
minute or two per tree."""


def digest(result: ScheduleResult) -> str:
    """Every job's outcome and every allocation, exactly (floats by repr), hashed."""
    jobs = [(j.job_id, j.status, j.first_start_s, j.finish_s, j.sizes, j.preemptions) for j in result.jobs]
    segments = [(s.job_id, s.node, s.gpus, s.start_s, s.end_s) for s in result.segments]
    return hashlib.sha256(repr((jobs, segments)).encode()).hexdigest()[:16]


def main() -> None:
    cluster = get_cluster(CLUSTER)
    speed = SpeedModel(cluster, get_engine())
    for family, num_jobs, gpus, seed in TRACES:
        jobs = synthetic_trace(family, num_jobs, seed, speed, gpus, 1.5)
        for name in POLICY_NAMES:
            result = simulate(jobs, Pool(cluster, gpus), speed, make_policy(name))
            print(f"{family} {num_jobs} jobs {gpus} GPUs seed {seed} {name:<12} {digest(result)} "
                  f"preemptions {result.summary()['preemptions']}", flush=True)


if __name__ == "__main__":
    main()
