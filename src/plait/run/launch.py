"""Start ranks through torchrun on this node (a plan's, or a workload worker's), or print the command for several
nodes."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from plait.errors import MissingExtra
from plait.run.config import config_argv, write_config
from plait.run.lifecycle import supervise
from plait.run.worker_config import WorkerConfig

WORKER = "plait.run.worker"


class RanksFailed(Exception):
    """The ranks' run ended with a non-zero exit code (:func:`plait.run.lifecycle.supervise` named the cause and
    the log)."""

    def __init__(self, code: int) -> None:
        super().__init__(f"ranks failed with exit code {code}")
        self.code = code
        """The run's exit code (:mod:`plait.run.narration`)."""


GPU_LIBRARIES = ("torch_cuda", "torch_hip")
"""What a CUDA or ROCm build of PyTorch links into its ``torch/lib`` folder and a CPU-only build lacks (the CMake
targets ``torch_cuda`` and ``torch_hip`` of pytorch/pytorch caffe2/CMakeLists.txt: ``libtorch_cuda.so``,
``torch_cuda.dll``); ``torch.cuda`` is available only in such a build."""


def local_slots() -> int | None:
    """GPUs on this node, or ``None`` on a CPU-only machine (ranks then share the cores). A CPU-only build of torch
    answers without being imported (1-2 s of CPU that ``plait run``'s launching process spends on nothing else)."""
    found = importlib.util.find_spec("torch")
    if found is None:  # pragma: no cover - plait[run] installs torch
        raise MissingExtra("plait run", "run", "torch")
    lib = Path(next(iter(found.submodule_search_locations or [""]))) / "lib"
    if lib.is_dir() and not any(name in f.name for f in lib.iterdir() for name in GPU_LIBRARIES):
        return None
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else None


def multinode_command(config: WorkerConfig, nodes: int, per_node: int) -> str:
    """The torchrun line to run on each of ``nodes`` nodes (rendezvous host to fill in): the rank's configuration
    as the worker's options (:func:`plait.run.config.config_argv`), since a file here is not on the other nodes."""
    parts = ["torchrun", f"--nnodes={nodes}", f"--nproc-per-node={per_node}", "--rdzv-backend=c10d",
             "--rdzv-endpoint=<first-node-host>:29500", "-m", WORKER, *config_argv(config)]
    return " ".join(shlex.quote(p) for p in parts)


def run_worker(module: str, ranks: int, config: Any) -> dict[str, Any]:
    """``module`` on ``ranks`` local processes (torchrun's standalone rendezvous, supervised), each reading
    ``config`` (a run configuration with an ``out`` field, pointed at a temporary file) from a file; the JSON rank 0
    wrote. A failure raises :class:`RanksFailed` and leaves the ranks' output in the current folder
    (:data:`plait.run.lifecycle.LOG_NAME`)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        config_file = write_config(replace(config, out=out), Path(tmp) / "config.json")
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", "-m",
                   module, "--config", str(config_file)]
        code = supervise(command, {**os.environ, "OMP_NUM_THREADS": "1"}, Path.cwd())
        if code != 0:
            raise RanksFailed(code)
        return json.loads(out.read_text())  # type: ignore[no-any-return]


def run_local(config_file: Path, nproc: int, max_restarts: int, log_folder: Path) -> int:
    """Run ``nproc`` ranks here with torchrun's standalone rendezvous, each reading ``config_file`` (a
    :class:`plait.run.worker_config.WorkerConfig` written by :func:`plait.run.config.write_config`), tied to this
    process (:mod:`plait.run.lifecycle`, its output logged in ``log_folder``); returns the run's exit code
    (:mod:`plait.run.narration`).
    torchrun's elastic agent restarts all ranks up to ``max_restarts`` times after a failure; the ranks then
    resume from the newest valid checkpoint (:mod:`plait.run.worker`)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               f"--max-restarts={max_restarts}", "-m", WORKER, "--config", str(config_file)]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    return supervise(command, env, log_folder, max_restarts)
