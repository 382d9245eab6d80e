"""Every synchronization method side by side: measured step time against plait's prediction,
on plain loopback and on two emulated sites (target |error| <= 20%).

Run: python benchmarks/sync_methods.py [--where loopback|sites|both] [--steps 16] [--quick] [--model FILE]
     [--methods SPEC ...]   (sites: root, Linux; with --methods, only those and the baseline)

Loopback: ``plait calibrate --ranks 4`` describes this machine as 4 ranks use it; each method trains
examples/small-model.toml on 4 ranks through ``plait run``'s worker (the asynchronous ones through
:mod:`plait.run.async_train`, 4 workers and their server ranks), and the mean step period after the first
synchronization period is printed next to ``plait estimate`` on the calibrated cluster (engine plait).
Sites: the two namespaces joined by a shaped veth pair of ``benchmarks/low_comm.py``, whose functions this reuses
(the asynchronous methods run on loopback only: their server rank would sit in one of the sites). Methods that
need hardware this machine lacks are left out and say why: ``switch_aggregation`` needs a tier whose switches
aggregate (the runtime's rank-0 emulation is not a switch: its link carries every rank's traffic).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import low_comm  # the two-site machinery (a sibling script, not a package)

ROOT = Path(__file__).parents[1]
MODEL = low_comm.MODEL
SYNCHRONOUS = [*low_comm.METHODS, "param_server:servers=4", "param_server:servers=2,placement=layerwise",
               "gossip:topology=ring", "gossip:topology=exponential"]
ASYNCHRONOUS = ["async_ps:staleness=100", "easgd:alpha=0.45,every=4"]
RANKS = 4
LEFT_OUT = {"switch_aggregation": "needs a tier whose switches aggregate; this machine has none"}


def calibrate(path: Path, quick: bool) -> None:
    subprocess.run([sys.executable, "-m", "plait", "calibrate", "--ranks", str(RANKS), "--output", str(path),
                    *(["--quick"] if quick else [])], check=True, capture_output=True,
                   env={**os.environ, "OMP_NUM_THREADS": "1"})


def run_loopback(spec: str, steps: int, folder: Path, cluster: Path, precision: list[str]) -> list[float]:
    """When each step of rank 0 began, for ``spec`` on 4 ranks of this machine through ``plait run``'s worker."""
    name = low_comm.stem(spec)
    plan, metrics = folder / f"{name}.toml", folder / f"{name}.jsonl"
    plan.write_text(f'[job]\nmodel = "{MODEL}"\ncluster = "{cluster}"\n[plan]\n{low_comm.PLAN}dp_sync = "{spec}"\n')
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={RANKS}", "-m",
                    "plait.run.worker", "--plan", str(plan), "--steps", str(steps), "--metrics", str(metrics),
                    *precision], check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return [json.loads(line)["started_s"] for line in metrics.read_text().splitlines()]


def run_asynchronous(spec: str, steps: int, folder: Path, bf16: bool) -> float:
    """Mean seconds per iteration of the workers (after the first period) for ``spec`` on 4 workers of this
    machine and its server ranks."""
    from plait.sync import parse

    out = folder / f"{low_comm.stem(spec)}.json"
    world = RANKS + parse(spec).server_ranks
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}", "-m",
                    "plait.run.async_train", "--out", str(out), "--model", str(MODEL), "--spec", spec, "--steps",
                    str(steps), "--batch", "16", "--optimizer", "adamw", *(["--bf16"] if bf16 else [])],
                   check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    workers = json.loads(out.read_text())[spec]["workers"]
    skip = max(2, every(spec) if spec.startswith("easgd") else 2)
    return sum((w["times"][-1] - w["times"][skip - 1]) / (len(w["times"]) - skip) for w in workers) / len(workers)


def every(spec: str) -> int:
    """Steps per synchronization period (the baseline never synchronizes: 1)."""
    from plait.sync import parse

    return 1 if spec == low_comm.BASELINE else parse(spec).every


def period(starts: list[float], every: int) -> float:
    """The period the job steps at, over whole synchronization periods after the first (low_comm's rule)."""
    start = max(every, 2)
    end = start + (len(starts) - 1 - start) // every * every
    return (starts[end] - starts[start]) / (end - start)


def drawn_palsgd(spec: str, steps: int) -> str:
    """``spec`` with ``p`` replaced by the share of pseudo-synchronization steps the measured steps drew (after the
    first period, as :func:`period` measures)."""
    import dataclasses
    import itertools

    from plait.run.outer_loop import pseudo_steps
    from plait.sync import parse

    sync = parse(spec)
    start = max(sync.every, 2)
    end = start + (steps - 1 - start) // sync.every * sync.every
    draws = list(itertools.islice(pseudo_steps(sync.p), steps))[start:end]
    share = sum(draws) / len(draws)
    return dataclasses.replace(sync, p=share).spec


def report(where: str, cluster_path: Path, measured: dict[str, float], full_precision: bool,
           baselines: dict[str, str], steps: int) -> None:
    """Measured and predicted step time per method, and the seconds each adds to the run of its harness that never
    synchronizes (``baselines``: method -> that run's key in ``measured``), which separates the synchronization's
    own error from the compute's."""
    from plait.engine.catalog import get_engine
    from plait.hardware.catalog import load_cluster_file
    from plait.plan.plan import Plan
    from plait.predict.estimate import estimate
    from plait.workload.catalog import resolve_model

    cluster, model = load_cluster_file(cluster_path), resolve_model(str(MODEL))
    print(f"\n{where}: {'fp32' if full_precision else 'bf16'}, {RANKS} ranks, {MODEL.name}")
    print(f"{'dp_sync':44s} {'measured s':>11s} {'predicted s':>12s} {'error':>7s} {'sync meas.':>11s} "
          f"{'sync pred.':>11s}")

    def predict(spec: str) -> float:
        method = spec.partition("@")[0]
        if method.startswith("palsgd"):  # at the share of pseudo-steps the measured steps drew, as low_comm does
            method = drawn_palsgd(method, steps)
        plan = Plan(dp_replicate=RANKS, global_batch=16, micro_batch=4, dp_sync=method)
        return estimate(model, cluster, plan, engine=get_engine("plait")).step_time_s

    errors = []
    for spec, seconds in measured.items():
        predicted = predict(spec)
        base = spec if spec.endswith("@async_train") else baselines.get(spec, low_comm.BASELINE)
        error = 100 * (predicted / seconds - 1)
        errors.append(abs(error))
        print(f"{spec:44s} {seconds:11.3f} {predicted:12.3f} {error:+6.1f}% {seconds - measured[base]:+11.3f} "
              f"{predicted - predict(base):+11.3f}")
    print(f"within 20%: {sum(e <= 20 for e in errors)} of {len(errors)}")
    for method, why in LEFT_OUT.items():
        print(f"{method}: left out, {why}")


def loopback(args: argparse.Namespace, folder: Path) -> None:
    cluster = folder / "loopback.toml"
    calibrate(cluster, args.quick)
    precision = ["--full-precision"] if args.full_precision else low_comm.FULL_PRECISION
    measured = {}
    for spec in [low_comm.BASELINE, *(args.methods or SYNCHRONOUS)]:
        measured[spec] = period(run_loopback(spec, args.steps, folder, cluster, precision), every(spec))
    harness = f"{low_comm.BASELINE}@async_train"  # the asynchronous runs' own loop, never synchronizing
    if args.methods is None:  # the asynchronous methods run with the default list
        measured[harness] = run_asynchronous(low_comm.BASELINE, args.steps, folder, not precision)
        for spec in ASYNCHRONOUS:
            measured[spec] = run_asynchronous(spec, args.steps, folder, not precision)
    report("loopback", cluster, measured, bool(precision), dict.fromkeys(ASYNCHRONOUS, harness), args.steps)


def sites(args: argparse.Namespace, folder: Path) -> None:
    import tomllib

    if os.geteuid() != 0:
        print("sites: SKIP, needs root (network namespaces and a tbf qdisc)")
        return
    precision = ["--full-precision"] if args.full_precision else low_comm.FULL_PRECISION
    with low_comm.two_sites(args.rate) as (names, links):
        site_file = folder / "site.toml"
        low_comm.wait_all([low_comm.in_site(names[0], links[0], [
            sys.executable, "-m", "plait", "calibrate", "--ranks", str(RANKS), "--output", str(site_file),
            *(["--quick"] if args.quick else [])])], "plait calibrate")
        cluster = folder / "two-sites.toml"
        low_comm.cluster_file(tomllib.loads(site_file.read_text()), low_comm.measure_link(names, links, folder),
                              cluster)
        measured = {spec: period(low_comm.run_method(names, links, spec, args.steps, folder, precision, cluster),
                                 every(spec)) for spec in [low_comm.BASELINE, *(args.methods or SYNCHRONOUS)]}
    report(f"two sites over {args.rate}", cluster, measured, bool(precision), {}, args.steps)


def main() -> int:
    global MODEL
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--where", default="both", choices=("loopback", "sites", "both"))
    parser.add_argument("--rate", default="200mbit", help="tbf rate of the two sites' link, each way")
    parser.add_argument("--steps", type=int, default=16, help="optimizer steps per method (a multiple of 4)")
    parser.add_argument("--quick", action="store_true", help="plait calibrate --quick")
    parser.add_argument("--full-precision", action="store_true", help="train and predict fp32")
    parser.add_argument("--methods", nargs="+", default=None,
                        help="synchronous specs to measure (default: every synchronous method plait models); the "
                        "baseline always runs")
    parser.add_argument("--model", type=Path, default=MODEL, help="model file every method trains")
    args = parser.parse_args()
    MODEL = low_comm.MODEL = args.model.resolve()  # low_comm's two-site runs read its module's MODEL
    with tempfile.TemporaryDirectory() as tmp:  # a folder each: the worker appends to a method's metrics file
        for where, run in (("loopback", loopback), ("sites", sites)):
            if args.where in (where, "both"):
                (Path(tmp) / where).mkdir()
                run(args, Path(tmp) / where)
    return 0


if __name__ == "__main__":
    sys.exit(main())
