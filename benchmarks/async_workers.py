"""Two workers of different speeds, the same wall time: asynchronous SGD through a server against the synchronous
all-reduce, and the staleness each update had, measured next to plait's prediction.

Run: python benchmarks/async_workers.py [--seconds 30] [--slow 0.15] [--optimizer sgd]

Worker 1 sleeps ``--slow`` seconds every iteration (an artificially slower GPU). Each method trains
examples/tiny-model.toml for ``--seconds`` of wall time (:mod:`plait.run.async_train`: 2 workers, and for the
asynchronous methods 1 server rank), from the same weights on the same corpus; the final model (the server's, or
the replicas') is scored on a held-out batch. The model's inputs are the workers' speeds: each worker's mean
compute per iteration (forward, backward and sleep, before it exchanges with the server) in the first
asynchronous run (on 2 shared cores a worker's speed depends on what the others run, so it is measured rather
than derived); messages of the tiny model (0.7 MB on loopback) and the server's
update are taken as free. From those, the synchronous run steps at the slower worker's pace, and
:func:`plait.events.async_sgd.simulate_async` predicts the updates each worker contributes under each staleness
bound and their staleness distribution; plait's steps multipliers (:mod:`plait.plan.convergence`) then say whether
the asynchronous run should reach a lower loss in the same time: it trains on ``samples_async / samples_sync``
times the samples and needs ``multiplier`` times the steps.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from plait.events.async_sgd import simulate_async
from plait.plan.convergence import convergence
from plait.sync import parse

ROOT = Path(__file__).parents[1]
MODEL = ROOT / "examples" / "tiny-model.toml"
METHODS = ["allreduce", "async_ps:staleness=100", "async_ps:staleness=1"]
"""The synchronous reference and two staleness bounds with measured multipliers (plait converge, equal workers)."""


def run(spec: str, seconds: float, slow: float, optimizer: str, folder: Path) -> dict:  # type: ignore[type-arg]
    """One run of ``spec`` on 2 workers (and its server ranks); the harness's JSON."""
    out = folder / f"{spec.replace(':', '_')}.json"
    world = 2 + parse(spec).server_ranks
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}", "-m",
               "plait.run.async_train", "--out", str(out), "--model", str(MODEL), "--spec", spec, "--seconds",
               str(seconds), "--slow", f"1:{slow}", "--optimizer", optimizer]
    subprocess.run(command, check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return json.loads(out.read_text())[spec]  # type: ignore[no-any-return]


def histogram(values: list[int]) -> dict[int, float]:
    counts: dict[int, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return {k: counts[k] / len(values) for k in sorted(counts)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--slow", type=float, default=0.15)
    parser.add_argument("--optimizer", default="adamw", choices=("sgd", "adamw"),
                        help="adamw: the optimizer plait's multipliers were measured with")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        results = {spec: run(spec, args.seconds, args.slow, args.optimizer, Path(tmp)) for spec in METHODS}
    reference = results["allreduce"]
    speeds = [sum(w["compute_s"]) / len(w["compute_s"]) for w in results[METHODS[1]]["workers"]]
    sync_samples = len(reference["workers"][0]["losses"]) * 2
    predicted_sync = 2 * args.seconds / max(speeds)
    print(f"2 workers, worker 1 sleeps {args.slow:g} s per iteration; {args.seconds:g} s each; iteration "
          f"{speeds[0]:.4f} s and {speeds[1]:.4f} s of compute (measured, {METHODS[1]}: the model's inputs); "
          f"synchronous iterations {sync_samples // 2} measured, {predicted_sync / 2:.0f} predicted")
    print(f"{'method':26} {'iterations':>12} {'held-out loss':>14} {'samples vs sync':>16} {'predicted':>10} "
          f"{'multiplier':>10}  {'loss vs sync':34}  staleness measured | predicted")
    for spec, result in results.items():
        counts = [len(w["losses"]) for w in result["workers"]]
        ratio = sum(counts) / sync_samples
        sync = parse(spec)
        if sync.method == "async_ps":
            bound = sync.staleness
            sim = simulate_async(speeds, 0.0, 0.0, 0.0, bound, 10**7, until_s=args.seconds)
            predicted = sum(sim.updates_by_worker) / predicted_sync
            measured = histogram([s for server in result["servers"] for _, s, _ in server["updates"]])
            staleness = (", ".join(f"{k}:{v:.2f}" for k, v in measured.items()) + " | "
                         + ", ".join(f"{k}:{v:.2f}" for k, v in sim.staleness.items()))
        else:
            predicted, staleness = 1.0, "-"
        figure = convergence(sync, 2)
        multiplier = f"{figure.multiplier:.3f}" if figure.known else "unknown"
        verdict = ("-" if spec == "allreduce" or not figure.known else
                   f"{'lower' if predicted / figure.factor > 1 else 'higher'} predicted, "
                   f"{'lower' if result['held_out_loss'] < reference['held_out_loss'] else 'higher'} measured")
        print(f"{spec:26} {tuple(counts)!s:>12} {result['held_out_loss']:14.4f} {ratio:16.3f} {predicted:10.3f} "
              f"{multiplier:>10}  {verdict:34}  {staleness}")
    print("loss vs the synchronous run: lower predicted where samples vs sync (predicted) / multiplier > 1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
