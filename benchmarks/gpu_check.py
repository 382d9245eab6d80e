"""The GPU check of plait's runtime: one prepared script for a lent GPU machine (an H200), under 8 minutes.

Run from the repository root:  python benchmarks/gpu_check.py      (no install, no downloads)

It prints the device, PyTorch, CUDA, NCCL and torchao versions, then trains a ~350M-parameter Llama-shaped
model (written to a temporary folder; byte tokens from CPython's own docs, plait/run/data.py) under each plan
of :data:`CASES` through ``python -m torch.distributed.run --standalone`` and ``plait.run.worker``, and prints
the measured median step time (after the first step) and peak memory of rank 0 (its metrics JSONL) next to
plait's prediction for the same plan on the ``dgx-h100-ib`` preset carrying the ``h200`` accelerator, as
``plait run`` predicts (``estimate(..., engine=get_engine("plait"))``, plait/run/plan_run.py). Plans that need two
GPUs (cp=2 with PyTorch's ring and with plait's Ulysses all-to-all on NCCL, tp=2 with async TP) print SKIP with
the reason on a one-GPU machine; with two or more GPUs they run, and a fp32 loss-parity check of context parallelism (tiny model, cp=1 against cp=2) runs too. Every case
is guarded: a failure prints its error line and the next case runs; a total time budget skips what is left.

torchao (for the fp8 case) is not in the GPU image: carry a wheel (the device README's recipe), e.g. here
``python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
--platform manylinux_2_28_x86_64 -d .whl torchao==0.18.0`` (torchao 0.18 needs torch >= 2.11), and start
the command there with ``python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
export PYTHONPATH=/tmp/site;``. Without it the fp8 case prints SKIP.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
sys.path.insert(0, str(SRC))

GIB = 1024**3
BUDGET_S = 450.0  # the whole script, torch start-up included (a lent machine gives 15 minutes in all)
CASE_TIMEOUT_S = 240.0
STEPS = 12
TINY_MODEL = ROOT / "examples" / "tiny-model.toml"

# ~350M parameters: 24 layers x 11.7M (GQA attention 3.1M + SwiGLU 8.7M) + 2 x 32768 x 1024 embeddings.
MODEL_TOML = """# Written by benchmarks/gpu_check.py: a Llama-shaped model for one GPU check; not a published model.
name = "gpu-check-350m"
num_layers = 24
hidden_size = 1024
num_heads = 16
num_kv_heads = 8
head_dim = 64
ffn_hidden_size = 2816
mlp = "gated"
vocab_size = 32768
seq_len = 2048
tied_embeddings = false
norm = "rmsnorm"
position = "rope"
source = "assumed: a ~350M Llama-3-shaped model for benchmarks/gpu_check.py (byte tokens use 256 of the vocabulary)"
"""


@dataclass(frozen=True, kw_only=True)
class Case:
    """One plan the check trains."""

    name: str
    """Row label."""
    nproc: int
    """GPUs (ranks) it needs: the plan's pp * dp * cp * tp."""
    plan: str
    """The ``[plan]`` table's own lines; :data:`COMMON` is added."""
    needs: str = ""
    """A Python package the case needs beyond PyTorch."""


COMMON = "global_batch = 8\nmicro_batch = 4"
CASES: tuple[Case, ...] = (
    Case(name="bf16", nproc=1, plan=""),
    Case(name="bf16-swap", nproc=1, plan="swap_activations = true"),  # saved activations to pinned host memory
    Case(name="fp8-torchao", nproc=1, plan='precision = "fp8"', needs="torchao"),
    Case(name="cp2", nproc=2, plan='cp = 2\nsharding = "zero3"'),
    Case(name="cp2-ulysses", nproc=2, plan='cp = 2\ncp_attention = "ulysses"\nsharding = "zero3"'),
    Case(name="tp2-sp", nproc=2, plan="tp = 2\nsp = true"),
    Case(name="tp2-sp-async-tp", nproc=2, plan="tp = 2\nsp = true\ntp_comm_overlap = true"),
)


def plan_text(case: Case, model_path: Path) -> str:
    """The plan file of ``case`` for the model at ``model_path``."""
    body = "\n".join(part for part in (case.plan, COMMON) if part)
    return f'[job]\nmodel = "{model_path}"\ncluster = "dgx-h100-ib"\n[plan]\n{body}\n'


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    env.setdefault("OMP_NUM_THREADS", "4")
    return env


def _error_line(text: str) -> str:
    """The most telling line of a failed run's output: the last one naming an error, else the last one."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    named = [line for line in lines if "Error" in line or "error:" in line]
    return (named or lines or ["(no output)"])[-1][:300]


def train(plan_file: Path, nproc: int, metrics: Path, timeout_s: float, *extra: str) -> list[dict[str, float]]:
    """Train ``plan_file`` on ``nproc`` local GPUs; the metrics rows of rank 0."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               "-m", "plait.run.worker", "--plan", str(plan_file), "--steps", str(STEPS), "--metrics", str(metrics),
               *extra]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=_env(), check=False)
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {_error_line(done.stderr + done.stdout)}")
    return [json.loads(line) for line in metrics.read_text().splitlines()]


def predict(plan_file: Path) -> tuple[float, float]:
    """plait's predicted step time (s) and peak memory (GiB) of the plan on dgx-h100-ib with H200s."""
    from plait.engine.catalog import get_engine
    from plait.hardware.catalog import get_accelerator, get_cluster, with_accelerator
    from plait.plan.io import read_plan_file
    from plait.predict.estimate import estimate
    from plait.workload.catalog import resolve_model

    job, plan = read_plan_file(plan_file)
    cluster = with_accelerator(get_cluster("dgx-h100-ib"), get_accelerator("h200"))
    est = estimate(resolve_model(job.model), cluster, plan, engine=get_engine("plait"))
    return est.step_time_s, est.memory.total_bytes / GIB


def environment() -> int:
    """Print the machine and library versions; returns the number of visible GPUs."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, GPUs {count}")
    if count:
        major, minor = torch.cuda.get_device_capability(0)
        total = torch.cuda.get_device_properties(0).total_memory / GIB
        print(f"device 0: {torch.cuda.get_device_name(0)}, sm{major}{minor}, {total:.1f} GiB; "
              f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}")
    spec = importlib.util.find_spec("torchao")
    if spec is None:
        print("torchao: not installed")
    else:
        from importlib.metadata import version

        print(f"torchao {version('torchao')}")
    return count


def skip_reason(case: Case, gpus: int) -> str | None:
    """Why ``case`` cannot run on this machine, or ``None``."""
    if gpus == 0:
        return "no GPU visible"
    if case.nproc > gpus:
        return f"needs {case.nproc} GPUs (one rank per GPU); this machine has {gpus}"
    if case.needs and importlib.util.find_spec(case.needs) is None:
        return f"{case.needs} is not installed (see this script's docstring)"
    return None


def run_case(case: Case, folder: Path, model_path: Path, timeout_s: float) -> str:
    """Train and predict one case; its table row."""
    plan_file = folder / f"{case.name}.toml"
    plan_file.write_text(plan_text(case, model_path))
    rows = train(plan_file, case.nproc, folder / f"{case.name}.jsonl", timeout_s)
    step_s = statistics.median(r["step_time_s"] for r in rows[1:])
    peak_gib = max(r["peak_memory_bytes"] for r in rows) / GIB
    try:
        pred_s, pred_gib = predict(plan_file)
        predicted = (f"{pred_s:11.4f} {100 * (pred_s / step_s - 1):+7.1f}% {peak_gib:9.2f} {pred_gib:9.2f} "
                     f"{100 * (pred_gib / peak_gib - 1):+7.1f}%")
    except Exception as exc:  # noqa: BLE001 - the measurement still counts when the prediction fails
        predicted = f"prediction failed: {type(exc).__name__}: {exc}"
    losses = f"loss {rows[0]['loss']:.3f}->{rows[-1]['loss']:.3f}"
    return f"{case.name:16s} {case.nproc:4d} {step_s:10.4f} {predicted}   {losses}"


def cp_parity(folder: Path, timeout_s: float) -> str:
    """fp32 losses of the tiny model, cp=1 on one GPU against cp=2 on two (efficient-attention ring)."""
    losses = []
    for nproc, body in ((1, ""), (2, "cp = 2")):
        plan_file = folder / f"parity-cp{nproc}.toml"
        plan_file.write_text(f'[job]\nmodel = "{TINY_MODEL}"\n[plan]\nglobal_batch = 8\nmicro_batch = 2\n{body}\n')
        rows = train(plan_file, nproc, folder / f"parity-cp{nproc}.jsonl", timeout_s / 2, "--full-precision")
        losses.append([r["loss"] for r in rows])
    worst = max(abs(a - b) / abs(a) for a, b in zip(*losses))
    verdict = "PASS" if worst <= 1e-4 else "FAIL"
    return f"cp parity (tiny model, fp32, {STEPS} steps): worst relative loss gap {worst:.2e} -> {verdict} (<= 1e-4)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=BUDGET_S, help="total time for all cases")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    gpus = environment()
    folder = Path(tempfile.mkdtemp(prefix="plait-gpu-check-"))
    model_path = folder / "model.toml"
    model_path.write_text(MODEL_TOML)
    print(f"model {model_path.name}: ~350M parameters, seq 2048, {COMMON.replace(chr(10), ', ')}, {STEPS} steps")
    print(f"{'plan':16s} {'gpus':>4s} {'measured s':>10s} {'predicted s':>11s} {'error':>8s} {'peak GiB':>9s} "
          f"{'pred GiB':>9s} {'error':>8s}")
    for case in CASES:
        left = args.budget_s - (time.perf_counter() - start)
        reason = skip_reason(case, gpus) or (f"time budget spent ({left:.0f} s left)" if left < 30 else None)
        if reason:
            print(f"{case.name:16s} SKIP: {reason}")
            continue
        try:
            print(run_case(case, folder, model_path, min(CASE_TIMEOUT_S, left)), flush=True)
        except Exception as exc:  # noqa: BLE001 - one failed case must not hide the others
            print(f"{case.name:16s} ERROR: {type(exc).__name__}: {exc}", flush=True)
    left = args.budget_s - (time.perf_counter() - start)
    if gpus < 2:
        print("cp parity SKIP: needs 2 GPUs")
    elif left < 60:
        print(f"cp parity SKIP: time budget spent ({left:.0f} s left)")
    else:
        try:
            print(cp_parity(folder, min(CASE_TIMEOUT_S, left)))
        except Exception as exc:  # noqa: BLE001
            print(f"cp parity ERROR: {type(exc).__name__}: {exc}")
    print(f"gpu_check done in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
