"""Start the ranks of a plan through torchrun on this node, or print the command for several nodes."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from plait.errors import ConfigError
from plait.run.lifecycle import supervise

WORKER = "plait.run.worker"


def local_slots() -> int | None:
    """GPUs on this node, or ``None`` on a CPU-only machine (ranks then share the cores)."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - plait[run] installs torch
        raise ConfigError("plait run needs PyTorch: pip install 'plait[run]'") from exc
    return torch.cuda.device_count() if torch.cuda.is_available() else None


def worker_args(plan_file: Path, extra: list[str]) -> list[str]:
    """Arguments of the per-rank entry point."""
    return ["-m", WORKER, "--plan", str(plan_file), *extra]


def multinode_command(plan_file: Path, nodes: int, per_node: int, extra: list[str]) -> str:
    """The torchrun line to run on each of ``nodes`` nodes (rendezvous host to fill in)."""
    parts = ["torchrun", f"--nnodes={nodes}", f"--nproc-per-node={per_node}", "--rdzv-backend=c10d",
             "--rdzv-endpoint=<first-node-host>:29500", *worker_args(plan_file, extra)]
    return " ".join(shlex.quote(p) for p in parts)


def run_local(plan_file: Path, nproc: int, extra: list[str], max_restarts: int = 0) -> int:
    """Run ``nproc`` ranks here with torchrun's standalone rendezvous, tied to this process
    (:mod:`plait.run.lifecycle`); returns its exit code (``128 + signal`` when this process was stopped).
    torchrun's elastic agent restarts all ranks up to ``max_restarts`` times after a failure; the ranks then
    resume from the newest valid checkpoint (:mod:`plait.run.worker`)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               f"--max-restarts={max_restarts}", *worker_args(plan_file, extra)]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    return supervise(command, env)
