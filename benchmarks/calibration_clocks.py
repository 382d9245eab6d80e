"""How the machine's load moves a calibrated compute figure, by clock.

Run: python benchmarks/calibration_clocks.py [--repeats 3]

Two processes (one thread each, as ``plait calibrate`` times its ranks) multiply fp32 ``n x n`` matrices at once
for 5 rounds of at least 0.2 s. Printed per size and repeat, in GFLOP/s: the median wall-clock rate of the first 3
rounds (what :func:`plait.run.calibrate_compute._timeit` takes), the fastest round's, the rate in the thread's CPU
time (``time.thread_time``), and the share of a core the ranks got (CPU time over wall time,
:func:`plait.run.calibrate_compute.core_share`), with the load average. On a machine other jobs load, the
wall-clock rates follow the share and the CPU-time rate stays; on an idle one the three agree.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time

import torch


def _rank(queue: mp.Queue, n: int) -> None:
    torch.set_num_threads(1)
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    walls, cpus = [], []
    for _ in range(5):
        count, wall, cpu = 0, time.perf_counter(), time.thread_time()
        while time.perf_counter() - wall < 0.2:
            torch.mm(a, b)
            count += 1
        walls.append((time.perf_counter() - wall) / count)
        cpus.append((time.thread_time() - cpu) / count)
    queue.put((statistics.median(walls[:3]), min(walls), statistics.median(cpus)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    context = mp.get_context("spawn")
    for repeat in range(args.repeats):
        for n in (256, 512):
            queue = context.Queue()
            ranks = [context.Process(target=_rank, args=(queue, n)) for _ in range(2)]
            load = os.getloadavg()[0]
            for rank in ranks:
                rank.start()
            results = [queue.get() for _ in ranks]
            for rank in ranks:
                rank.join()
            median_s, fastest_s, cpu_s = (statistics.median(x) for x in zip(*results))
            gflop = 2 * n**3 / 1e9
            print(f"repeat {repeat + 1} n={n} load {load:4.1f}: GFLOP/s wall median {gflop / median_s:7.2f}, "
                  f"fastest round {gflop / fastest_s:7.2f}, CPU time {gflop / cpu_s:7.2f}; "
                  f"share of a core {cpu_s / median_s:.2f}")


if __name__ == "__main__":
    main()
