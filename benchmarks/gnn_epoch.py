"""GNN epoch time on this machine, measured vs predicted (target |error| <= 20%).

Run: python benchmarks/gnn_epoch.py [--cluster FILE]
1. ``plait calibrate`` measures this machine into a temporary cluster file (or ``--cluster`` gives one it wrote):
   matmul, memory and collective figures, and the time plait's sampler takes per neighbour slot it scans, timed on
   a graph of its own (plait/run/calibrate_compute.py), not this one.
2. A degree-corrected SBM graph is generated (plait/run/graph.py) and ``plait.workloads.gnn.worker`` trains GraphSAGE
   on it by
   sampled data parallelism on ``--ranks`` gloo ranks for one epoch (every node a seed once on average: ``N / (B W)``
   steps) after ``WARMUP`` steps (a process's first steps page in its memory: 74 ms against 48 ms in steady state
   here); each phase (sampling, feature fetch, training) is timed per step.
3. :func:`plait.workloads.gnn.cost.estimate_gnn` predicts the same step from the calibrated cluster, the generated
   graph's
   statistics (its degree histogram and edge cut, known before training) and the job's batch.
Printed: each phase and the epoch, measured (the slowest rank's per-step mean) against predicted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import torch

from plait.hardware.catalog import load_cluster_file
from plait.run.config import write_config
from plait.run.graph import generate
from plait.workloads.gnn.cost import estimate_gnn
from plait.workloads.gnn.model import KINDS, GnnModel, GnnSpec, GraphStats
from plait.workloads.gnn.run import gnn_worker_config
from plait.workloads.gnn.sampler import Sampler
from plait.workloads.gnn.sampling import measured_classes

WARMUP = 5


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cluster", type=Path, help="a cluster file plait calibrate wrote (default: calibrate now)")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--edges", type=int, default=1_000_000)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--classes", type=int, default=8)
    p.add_argument("--exponent", type=float, default=2.5)
    p.add_argument("--kind", choices=KINDS, default="sage")
    p.add_argument("--heads", type=int, default=1)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--fanouts", type=int, nargs="+", default=[10, 5])
    p.add_argument("--batch", type=int, default=512, help="seeds per rank")
    p.add_argument("--cache", type=float, default=0.0)
    p.add_argument("--sampler", choices=("loop", "matrix"), default="loop")
    p.add_argument("--bulk", type=int, default=1, help="batches per bulk (matrix sampler)")
    p.add_argument("--adjacency", choices=("replicated", "partitioned"), default="replicated")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp())
    cluster_file = args.cluster or tmp / "calibrated.toml"
    if args.cluster is None:
        subprocess.run([sys.executable, "-m", "plait", "calibrate", "--ranks", str(args.ranks), "--output",
                        str(cluster_file)], check=True, capture_output=True)
    cluster = load_cluster_file(cluster_file)

    steps = -(-args.nodes // (args.batch * args.ranks * args.bulk)) * args.bulk  # whole bulks
    warmup = -(-WARMUP // args.bulk) * args.bulk
    model = GnnModel(kind=args.kind, layers=len(args.fanouts), hidden=args.hidden, fanouts=tuple(args.fanouts),
                     heads=args.heads)
    asked = GnnSpec(name="benchmark", model=model, graph=GraphStats(
        nodes=args.nodes, edges=args.edges, features=args.features, classes=args.classes, train_nodes=args.nodes,
        degree_exponent=args.exponent, max_degree=args.nodes - 1))
    config = replace(gnn_worker_config(asked, args.batch, steps + warmup, args.cache), sampler=args.sampler,
                     bulk=args.bulk, adjacency=args.adjacency)
    out = tmp / "run.json"
    config_file = write_config(replace(config, out=out), tmp / "config.json")
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc-per-node={args.ranks}", "-m", "plait.workloads.gnn.worker", "--config",
                            str(config_file)],
                          capture_output=True, text=True, check=False, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode:
        sys.exit(f"the GNN run failed:\n{done.stderr[:4000]}")
    run = json.loads(out.read_text())

    mix = config.mix
    graph = generate(args.nodes, args.edges, args.ranks, args.features, args.classes, exponent=args.exponent, mix=mix)
    degrees = graph.degrees()
    stats = GraphStats(nodes=graph.nodes, edges=graph.edges, features=args.features, classes=args.classes,
                       train_nodes=graph.nodes, degree_exponent=args.exponent, max_degree=int(degrees.max()))
    spec = GnnSpec(name="benchmark", graph=stats, model=model)
    est = estimate_gnn(spec, cluster, args.ranks, args.batch, "sampled_dp", edge_cut=graph.edge_cut(),
                       cache_fraction=args.cache, classes=measured_classes(torch.bincount(degrees).numpy()),
                       sampler=Sampler(kind=args.sampler, bulk=args.bulk, partitioned=args.adjacency == "partitioned"))

    measured = {k: sum(v[warmup:]) / steps for k, v in run["phase_s"].items()}  # rank 0's: the ranks step together
    step = sum(run["step_times_s"][warmup:]) / steps
    predicted = {"sample": est.sampling_s, "fetch": est.fetch_s,
                 "train": est.compute_s + est.all_reduce_s + est.optimizer_s}
    print(f"{graph.nodes:,} nodes, {graph.edges:,} edges (cut {graph.edge_cut():.3f}), {args.kind} {args.fanouts}, "
          f"{args.sampler} sampler (bulk {args.bulk}, adjacency {args.adjacency}), "
          f"{args.batch} seeds x {args.ranks} ranks, {steps} steps per epoch; cluster {cluster_file}")
    print(f"{'phase':<8} {'measured s':>11} {'predicted s':>12} {'error':>8}")
    for name, value in predicted.items():
        print(f"{name:<8} {measured[name]:>11.4f} {value:>12.4f} {value / measured[name] - 1:>+8.1%}")
    print(f"{'step':<8} {step:>11.4f} {est.step_s:>12.4f} {est.step_s / step - 1:>+8.1%}  (measured step includes "
          "the loss's all-reduce for the log)")
    print(f"{'epoch':<8} {step * steps:>11.3f} {est.step_s * steps:>12.3f} {est.step_s / step - 1:>+8.1%}  ({steps} "
          "steps: whole bulks)")


if __name__ == "__main__":
    main()
