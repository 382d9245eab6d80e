"""Two tiny jobs time-sharing 2 gloo ranks in a crossover manner (:mod:`plait.run.crossover_pair`): the measured
period of one step of each, against the period :func:`plait.cost.crossover.pair_cost` predicts from each job's
compute and synchronization phases measured alone in the same round, and against running the two steps one after
the other.

Prints, per round, each job's compute and synchronization medians alone, the paired period measured and predicted,
the bound that sets it, measured/predicted, the gain measured and predicted, and whether each job's paired losses
equal its solo losses; then the median ratio over the rounds, the load average and the process's CPU time. Run:
``python benchmarks/crossover_pair.py [--rounds 5] [--steps 30] [--link-bytes-per-s 2e8]`` (0: loopback gloo only,
whose all-reduce computes on the same cores as the other job).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--link-bytes-per-s", type=float, default=2e8)
    args = parser.parse_args()
    load_before = os.getloadavg()
    cpu, wall = time.process_time(), time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "pair.json"
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m",
                        "plait.run.crossover_pair", "--out", str(out), "--rounds", str(args.rounds), "--steps",
                        str(args.steps), "--link-bytes-per-s", str(args.link_bytes_per_s)],
                       check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        result = json.loads(out.read_text())
    print(f"link {args.link_bytes_per_s:.3g} B/s, {args.steps} steps per run, {result['world']} ranks")
    print(f"{'round':>5} {'A c/s ms':>12} {'B c/s ms':>12} {'paired ms':>9} {'pred ms':>8} {'bound':>5} "
          f"{'meas/pred':>9} {'gain':>6} {'pred gain':>9} exact")
    ratios = []
    for i, rd in enumerate(result["rounds"]):
        solo, paired, pred = rd["solo"], rd["paired"], rd["predicted"]
        exact = all(max(abs(x - y) for x, y in zip(solo[n]["losses"], paired["losses"][n], strict=True)) <= 1e-5
                    for n in ("a", "b"))
        ratio = paired["period_s"] / pred["period_s"]
        ratios.append(ratio)
        ab = [f"{solo[n]['compute_s'] * 1e3:.1f}/{solo[n]['sync_s'] * 1e3:.1f}" for n in ("a", "b")]
        print(f"{i:>5} {ab[0]:>12} {ab[1]:>12} {paired['period_s'] * 1e3:>9.1f} {pred['period_s'] * 1e3:>8.1f} "
              f"{pred['bound']:>5} {ratio:>9.3f} {rd['one_after_other_s'] / paired['period_s'] - 1:>6.3f} "
              f"{pred['gain']:>9.3f} {exact}")
    print(f"median measured/predicted {statistics.median(ratios):.3f}; load {load_before[0]:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after on {os.cpu_count()} CPUs; wall {time.perf_counter() - wall:.1f} s, "
          f"this process's CPU {time.process_time() - cpu:.2f} s (the ranks' own not counted)")


if __name__ == "__main__":
    main()
