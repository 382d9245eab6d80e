"""Does the host stream hold on a CPU? ``plait run`` of the tiny model where dispatch dominates, against predictions.

Run: python benchmarks/host_dispatch_cpu.py [--cluster calibrated.toml | --quick] [--steps 12] [--micro-batch 1]
1. ``plait calibrate`` measures this machine (or ``--cluster`` names a description it wrote); among its figures
   ``host_launch_us``, the host's time to issue one kernel, and ``asynchronous_launch = false`` (a CPU runs each op
   inside its call, so a pass takes its device work plus its dispatch: :func:`plait.cost.host.exposed_host_s`).
2. ``plait run`` trains examples/tiny-model.toml (4 layers of hidden 64) with 2 DDP ranks at micro-batch 1: a
   layer's GEMMs are 64 x 64, so the step is mostly the host issuing some hundred ops per layer.
3. Printed: the median measured step (after the first) and the step ``plait estimate`` predicts on the calibrated
   description (engine ``plait``): with the host stream (the calibrated file as written), without it
   (``host_launch_us = 0``, all else as calibrated), and with the per-kernel count alone (the calibrated per-layer
   remainder ``host_layer_*_us`` set to 0: what the kernels counted from the model's structure at the measured
   per-kernel time explain). Target: |measured / predicted - 1| <= 20% with the host stream, and the host stream
   moving the prediction towards the measurement.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from plait.cost.host import BACKWARD_KERNELS_PER_FORWARD, dense_layer_kernels
from plait.cost.setup import Setup
from plait.engine.catalog import get_engine
from plait.hardware.catalog import load_cluster_file
from plait.hardware.cluster import Cluster
from plait.hardware.figure import Figure
from plait.plan.io import read_plan_file
from plait.predict.estimate import estimate
from plait.workload.catalog import resolve_model

ROOT = Path(__file__).parents[1]
MODEL = ROOT / "examples" / "tiny-model.toml"


def with_figures(cluster: Cluster, why: str, **values: float) -> Cluster:
    """``cluster`` with the named efficiency figures set to ``values`` (their source says ``why``)."""
    acc = cluster.accelerator
    eff = replace(acc.efficiency, **{k: Figure(value=v, source=f"assumed: {why}") for k, v in values.items()})
    return replace(cluster, accelerator=replace(acc, efficiency=eff))


def profiled_ops_per_layer(micro_batch: int) -> float:
    """Top-level ATen ops (views and transposes too: each is a host call) one layer of plait's runtime model issues
    forward and backward, profiled on the tiny model with 2 and 6 layers (the slope: embedding and head cancel)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from plait.run.model import build_model
    from plait.run.train import cross_entropy

    counts = []
    for layers in (2, 6):
        spec = replace(resolve_model(str(MODEL)), num_layers=layers)
        model = build_model(spec, spec.seq_len, 0)
        x = torch.randint(0, spec.vocab_size, (micro_batch, spec.seq_len))
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            cross_entropy(model(x), x).backward()
        counts.append(sum(1 for e in prof.events() if e.name.startswith("aten::")
                          and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))))
    return (counts[1] - counts[0]) / 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", type=Path, help="a description plait calibrate wrote (default: calibrate now)")
    parser.add_argument("--quick", action="store_true", help="calibrate --quick (a shorter gap to the run)")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--micro-batch", type=int, default=1)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    cluster_file = args.cluster
    if cluster_file is None:
        cluster_file = tmp / "calibrated.toml"
        subprocess.run([sys.executable, "-m", "plait", "calibrate", "--output", str(cluster_file),
                        *(["--quick"] if args.quick else [])], check=True, capture_output=True)
    plan_file, metrics = tmp / "plan.toml", tmp / "metrics.jsonl"
    plan_file.write_text(f'[job]\nmodel = "{MODEL}"\n[plan]\ndp_replicate = 2\nmicro_batch = {args.micro_batch}\n'
                         f"global_batch = {8 * args.micro_batch}\n")
    subprocess.run([sys.executable, "-m", "plait", "run", "--plan", str(plan_file), "--cluster", str(cluster_file),
                    "--steps", str(args.steps), "--metrics", str(metrics)], check=True, capture_output=True)
    steps = [json.loads(line)["step_time_s"] for line in metrics.read_text().splitlines()]
    measured = statistics.median(steps[1:])
    cluster, model = load_cluster_file(cluster_file), resolve_model(str(MODEL))
    _, plan = read_plan_file(plan_file)
    eff = cluster.accelerator.efficiency
    print(f"calibrated: host_launch_us {eff.host_launch_us.value:.2f} ({eff.host_launch_us.source}); "
          f"asynchronous_launch {cluster.accelerator.asynchronous_launch}; per-layer remainder fwd/bwd "
          f"{eff.host_layer_fwd_us.value:.0f}/{eff.host_layer_bwd_us.value:.0f} us")
    cases = {"with host stream": cluster,
             "without host stream": with_figures(cluster, "the host stream left out", host_launch_us=0.0),
             "per-kernel count only": with_figures(cluster, "the per-layer remainder left out",
                                                   host_layer_fwd_us=0.0, host_layer_bwd_us=0.0)}
    print(f"tiny model, 2 DDP ranks, micro-batch {args.micro_batch}, {args.steps} steps: measured {measured:.4f} s "
          f"(steps after the first: {', '.join(f'{s:.3f}' for s in steps[1:])})")
    ops = profiled_ops_per_layer(args.micro_batch)
    counted = dense_layer_kernels(Setup(model=model, cluster=cluster, plan=plan.with_seq_len(model.seq_len),
                                        framework=get_engine("plait").framework))
    print(f"per layer: {ops:.0f} top-level ATen ops profiled (forward and backward), "
          f"{counted * (1 + BACKWARD_KERNELS_PER_FORWARD):.0f} kernels counted by the host stream")
    print(f"{'prediction':24s} {'predicted s':>12s} {'host s':>8s} {'measured/predicted':>19s}")
    for name, described in cases.items():
        est = estimate(model, described, plan, engine=get_engine("plait"))
        print(f"{name:24s} {est.step_time_s:12.4f} {est.time.host_s:8.4f} {measured / est.step_time_s:19.3f}")


if __name__ == "__main__":
    main()
