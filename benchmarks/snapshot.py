"""Write the JSON every shipped example and dataset gives, one file per command, to prove a change keeps behaviour.

    python benchmarks/snapshot.py OUT_DIR [--src SRC]   # then: diff -r OLD_DIR NEW_DIR

Runs ``plait validate --json`` on every shipped dataset and ``plait estimate/plan/simulate --json`` on every shipped
example and README scenario, through ``python -m plait`` with ``SRC`` (default: this checkout's ``src``) first on
``PYTHONPATH``, so two trees can be compared with one environment. Fields that measure the machine rather than the
prediction (wall-clock seconds of a search) are removed before writing. Two runs of one tree give identical folders.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMING_KEYS = {"search_s", "elapsed_s", "wall_s", "seconds", "took_s", "search_seconds", "candidates_per_s"}
"""Keys whose values are wall-clock measurements of plait itself, not predictions."""

LLM_PLANS = ["examples/llama3-8b-fsdp.toml", "examples/llama3-70b-pp.toml", "examples/tiny-plan.toml"]
MODEL_FILES = ["examples/small-model.toml", "examples/tiny-model.toml", "examples/tiny-moe.toml",
               "tests/data/wide-model.toml"]
COMMANDS: dict[str, list[str]] = {
    "validate-runs": ["validate", "--runs", "src/plait/validate/data/dev.csv"],
    "validate-memory": ["validate", "--memory", "src/plait/validate/data/memory_runs.csv"],
    "validate-classic": ["validate", "--classic", "src/plait/validate/data/classic_dp.csv"],
    "validate-gnn": ["validate", "--gnn", "src/plait/validate/data/gnn_epochs.csv"],
    "validate-dit": ["validate", "--dit", "src/plait/validate/data/dit_latency.csv"],
    "models": ["models"],
    "clusters": ["clusters"],
    "engines": ["engines"],
    "estimate-default": ["estimate"],
    "estimate-70b-tp8pp2": ["estimate", "--model", "llama3-70b", "--cluster", "dgx-h100-ib", "--gpus", "64", "--tp",
                            "8", "--pp", "2", "--sharding", "zero1", "--recompute", "selective", "--global-batch",
                            "512"],
    "estimate-my-cluster": ["estimate", "--cluster", "examples/my-cluster.yaml", "--gpus", "64"],
    "estimate-mixed-a100-h100": ["estimate", "--cluster", "a100-h100-ib", "--global-batch", "512"],
    "estimate-mixed-gpu-cpu": ["estimate", "--cluster", "examples/mixed-gpu-cpu.toml", "--model", "gpt3-125m",
                               "--global-batch", "64"],
    "plan-mixed-gpu-cpu": ["plan", "--cluster", "examples/mixed-gpu-cpu.toml", "--model", "gpt3-125m",
                           "--global-batch", "64"],
    "estimate-resnet50": ["estimate", "--model", "plait.workload.zoo:resnet50", "--cluster", "dgx-a100-ib", "--gpus",
                          "64", "--global-batch", "2048"],
    "estimate-dlrm-small": ["estimate", "--model", "examples/dlrm-small.toml", "--gpus", "16", "--global-batch",
                            "65536"],
    "estimate-dlrm-tiny": ["estimate", "--model", "examples/dlrm-tiny.toml", "--gpus", "2", "--global-batch", "8"],
    "estimate-gnn": ["estimate", "--model", "examples/graphsage-ogbn-products.toml", "--gpus", "8", "--global-batch",
                     "8192"],
    "estimate-gnn-matrix": ["estimate", "--model", "examples/graphsage-ogbn-products.toml", "--gpus", "8",
                            "--global-batch", "8192", "--gnn-sampler", "matrix:bulk=8,adjacency=partitioned"],
    "estimate-gnn-tiny": ["estimate", "--model", "examples/gnn-tiny.toml", "--gpus", "2", "--global-batch", "64"],
    "estimate-flux": ["estimate", "--model", "examples/flux-1-dev-1024px.toml", "--parallel", "ulysses=2,ring=2"],
    "estimate-dit-xl": ["estimate", "--model", "examples/dit-xl-2-1024px.toml", "--parallel",
                        "pipefusion=4,patches=8"],
    "estimate-pixart": ["estimate", "--model", "examples/pixart-alpha-1024px.toml"],
    "estimate-dit-tiny": ["estimate", "--model", "examples/dit-tiny.toml", "--parallel", "ulysses=2"],
    "estimate-two-regions-diloco": ["estimate", "--model", "llama3-8b", "--cluster", "h100-2x64-two-regions",
                                    "--gpus", "128", "--dp-replicate", "2", "--dp-sync", "diloco:every=64"],
    "estimate-powersgd": ["estimate", "--model", "llama3-8b", "--gpus", "64", "--cluster", "dgx-a100-ib",
                          "--sharding", "none", "--dp-sync", "powersgd:rank=4"],
    "estimate-param-server": ["estimate", "--model", "llama3-8b", "--gpus", "16", "--sharding", "none", "--dp-sync",
                              "param_server:servers=2,placement=layerwise"],
    "estimate-async-ps": ["estimate", "--model", "llama3-8b", "--gpus", "16", "--sharding", "none", "--dp-sync",
                          "async_ps:staleness=2"],
    "estimate-gossip": ["estimate", "--model", "llama3-8b", "--gpus", "16", "--sharding", "none", "--dp-sync",
                        "gossip:topology=exponential,peers=2"],
    "estimate-moe": ["estimate", "--model", "mixtral-8x7b", "--gpus", "64", "--tp", "2", "--ep", "8",
                     "--global-batch", "256"],
    "plan-70b": ["plan", "--model", "llama3-70b", "--gpus", "64", "--global-batch", "512"],
    "plan-70b-p90": ["plan", "--model", "llama3-70b", "--gpus", "64", "--global-batch", "512", "--rank-by", "p90"],
    "plan-70b-torchtitan": ["plan", "--model", "llama3-70b", "--gpus", "64", "--global-batch", "512", "--engine",
                            "torchtitan"],
    "plan-cost": ["plan", "--model", "llama3-70b", "--objective", "cost", "--gpus-range", "1024:8192", "--tokens",
                  "15e12", "--deadline-days", "60", "--global-batch", "2048"],
    "plan-two-regions": ["plan", "--model", "llama3-8b", "--cluster", "h100-2x64-two-regions", "--gpus", "128"],
    "plan-mixed-h100-b200": ["plan", "--cluster", "h100-b200-ib", "--global-batch", "512"],
    "plan-traced": ["plan", "--model", "plait.workload.zoo:resnet50", "--input-shape", "3,224,224", "--gpus", "16",
                    "--global-batch", "4096"],
    "plan-dlrm": ["plan", "--model", "examples/dlrm-small.toml", "--gpus", "16", "--global-batch", "65536"],
    "plan-gnn": ["plan", "--model", "examples/graphsage-ogbn-products.toml", "--gpus", "8", "--global-batch", "8192"],
    "plan-dit": ["plan", "--model", "examples/dit-xl-2-1024px.toml", "--gpus", "8"],
    "plan-moe": ["plan", "--model", "mixtral-8x7b", "--gpus", "64", "--global-batch", "256"],
    "simulate-gnn": ["simulate", "--model", "examples/graphsage-ogbn-products.toml", "--gpus", "8",
                     "--global-batch", "8192"],
    "simulate-dit": ["simulate", "--model", "examples/dit-xl-2-1024px.toml", "--parallel", "pipefusion=4,patches=8"],
}
for _path in LLM_PLANS:
    COMMANDS[f"estimate-plan-{Path(_path).stem}"] = ["estimate", "--plan", _path]
    COMMANDS[f"simulate-plan-{Path(_path).stem}"] = ["simulate", "--plan", _path]
for _path in MODEL_FILES:
    COMMANDS[f"estimate-{Path(_path).stem}"] = ["estimate", "--model", _path, "--gpus", "2", "--global-batch", "8"]
    COMMANDS[f"plan-{Path(_path).stem}"] = ["plan", "--model", _path, "--gpus", "8", "--global-batch", "32"]


def scrub(value: object) -> object:
    """``value`` without the keys in :data:`TIMING_KEYS`, at any depth."""
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def run_one(name: str, args: list[str], src: Path, out: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(src), "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "plait", *args, "--json"], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=600)
    try:
        body = json.dumps(scrub(json.loads(done.stdout)), indent=1, sort_keys=True)
    except json.JSONDecodeError:
        body = f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr.strip().splitlines()[-1:]}"
    (out / f"{name}.json").write_text(body + "\n")
    return f"{name}: exit {done.returncode}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--src", type=Path, default=ROOT / "src")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default="", help="comma-separated command names")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    chosen = {k: v for k, v in COMMANDS.items() if not args.only or k in args.only.split(",")}
    with ThreadPoolExecutor(args.jobs) as pool:
        for line in pool.map(lambda item: run_one(*item, args.src.resolve(), args.out), chosen.items()):
            print(line, flush=True)


if __name__ == "__main__":
    main()
