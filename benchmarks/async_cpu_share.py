"""An asynchronous plan's workers and server ranks on this machine's cores: measured step and CPU seconds per step
beside plait's prediction (:mod:`plait.cost.async_sgd`, :mod:`plait.cost.host_share`).

Run: python benchmarks/async_cpu_share.py [--plan examples/async-ps-plan.toml] [--cluster examples/cpu-node.toml]
[--steps 60] [--predict-only]

The plan's ranks run through :mod:`plait.run.async_train` (as ``plait run --plan`` starts them), each recording
its CPU seconds (``time.process_time``) in its loop. Printed: the step (median after step 1, steps cut as
:func:`plait.run.async_plan.step_rows` cuts them) against the estimate, and the CPU seconds per step of the
workers and of the servers against the model's demand: per worker iteration its compute (the estimate's compute,
host and optimizer), its own host work per exchange (:func:`plait.cost.async_host.worker_own_s`) and half of each
of its messages' transfer times, per exchange at a server half of each message's transfer time and the update
(:func:`plait.cost.async_sgd.message_s`); ``--predict-only`` prints the predicted side alone, without running. CPU
seconds do not depend on what else the machine runs (much); the wall-clock step does: the load averages before and
after are printed, and a step under load is the load's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from plait.cost.async_host import worker_own_s
from plait.cost.async_sgd import message_s
from plait.hardware.catalog import resolve_cluster
from plait.run.async_plan import step_rows
from plait.sync import parse
from plait.sync.asynchronous import Asynchronous
from plait.workload.catalog import resolve_model
from plait.workload.tensors import parameter_shapes

ROOT = Path(__file__).resolve().parents[1]


def predicted_cpu_s(cluster_path: str, sync: Asynchronous, workers: int, model: str,
                    est: dict) -> dict[str, float]:  # type: ignore[type-arg]
    """Predicted CPU seconds per step: the workers' compute, their own exchange work and message ends, the
    servers' message ends and updates (module docstring)."""
    cluster, elements = resolve_cluster(cluster_path), est["params"]["total"]
    transfer, apply = message_s(cluster, sync, workers, 1, elements)
    times = est["time_breakdown_s"]
    busy = times["compute"] + times["host"] + times["optimizer"]
    servers, every = sync.server_ranks, sync.every
    own = worker_own_s(cluster, sync, elements, len(parameter_shapes(resolve_model(model))))
    parts = {"worker compute": workers * busy, "worker own": workers * own / every,
             "worker messages": workers * servers * transfer / every,
             "server messages": servers * workers * transfer / every,
             "server updates": servers * workers * apply / every}
    parts["workers"] = parts["worker compute"] + parts["worker own"] + parts["worker messages"]
    parts["servers"] = parts["server messages"] + parts["server updates"]
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", default=str(ROOT / "examples" / "async-ps-plan.toml"))
    parser.add_argument("--cluster", default=str(ROOT / "examples" / "cpu-node.toml"))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--predict-only", action="store_true", help="print the predicted side alone")
    args = parser.parse_args()
    table = tomllib.loads(Path(args.plan).read_text())
    sync, workers = parse(table["plan"]["dp_sync"]), table["plan"]["dp_replicate"]
    model = str(Path(args.plan).parent / table["job"]["model"])
    est = json.loads(subprocess.run([sys.executable, "-m", "plait", "estimate", "--plan", args.plan, "--cluster",
                                     args.cluster, "--engine", "plait", "--json"], capture_output=True, text=True,
                                    check=True).stdout)
    assert isinstance(sync, Asynchronous), f"{sync.spec} is not an asynchronous method"
    parts = predicted_cpu_s(args.cluster, sync, workers, model, est)
    if args.predict_only:
        print(f"{sync.spec} on {args.cluster}: step predicted {est['step_time_s']:.4f} s; CPU s per step predicted")
        for name, value in parts.items():
            print(f"  {name}: {value:.4f}")
        return
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        f"--nproc-per-node={workers + sync.server_ranks}", "-m", "plait.run.async_train", "--out",
                        str(out), "--model", model, "--spec", sync.spec, "--workers", str(workers), "--steps",
                        str(args.steps), "--optimizer", "adamw", "--bf16"], check=True, capture_output=True)
        result = json.loads(out.read_text())[sync.spec]
    rows = step_rows(result, workers, 1)
    measured = statistics.median(r["step_time_s"] for r in rows[1:])
    worker_cpu = sum(w["cpu_s"] for w in result["workers"]) / len(rows)
    server_cpu = sum(s["cpu_s"] for s in result["servers"]) / len(rows)
    predicted_workers, predicted_servers = parts["workers"], parts["servers"]
    print(f"{sync.spec} on {args.cluster}, {len(rows)} steps, load {load:.1f} before, {os.getloadavg()[0]:.1f} after")
    print(f"  step: measured {measured:.4f} s, predicted {est['step_time_s']:.4f} s "
          f"({est['step_time_s'] / measured - 1:+.1%})")
    for name, got, want in (("workers", worker_cpu, predicted_workers), ("servers", server_cpu, predicted_servers),
                            ("all", worker_cpu + server_cpu, predicted_workers + predicted_servers)):
        print(f"  CPU s per step, {name}: measured {got:.4f}, predicted {want:.4f} ({want / got - 1:+.1%})")


if __name__ == "__main__":
    main()
