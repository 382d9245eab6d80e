"""Pre-flight checks of ``plait run``: everything that can refuse a run before a process starts — the checkpoint
options and folder, and whether this machine's cores and memory hold the plan by plait's own estimate."""

from __future__ import annotations

import tempfile
from pathlib import Path

from plait.cost.estimate import Estimate
from plait.errors import ConfigError
from plait.plan.plan import Plan
from plait.run.checkpoint_room import check_options, check_room
from plait.run.lifecycle import available_memory_bytes
from plait.run.worker_config import SEED
from plait.search.parts import available_cores
from plait.units import format_bytes
from plait.workload.model import ModelSpec

RANKS_PER_CORE = 2
"""CPU ranks allowed per core. Assumed: gloo ranks beyond two per core mostly wait on the scheduler; this
project's tests run 4 ranks on its 2-core machine."""


def check_cpu_machine(ranks: int, bytes_per_rank: float) -> None:
    """Refuse more CPU ranks than this machine's cores take, or more memory than it has (plait's estimate)."""
    cores = available_cores()
    if ranks > RANKS_PER_CORE * cores:
        raise ConfigError(f"the plan needs {ranks} ranks but this CPU machine has {cores} cores "
                          f"(at most {RANKS_PER_CORE * cores} ranks: {RANKS_PER_CORE} per core)")
    free = available_memory_bytes()
    if free is not None and bytes_per_rank * ranks > free:
        raise ConfigError(f"the plan needs about {format_bytes(bytes_per_rank)} per rank x {ranks} ranks = "
                          f"{format_bytes(bytes_per_rank * ranks)} (plait's estimate) but this machine has "
                          f"{format_bytes(free)} available")


def check_machine(ranks: int, slots: int | None, predicted: Estimate) -> None:
    """Refuse, before a process starts, a plan this machine cannot hold: more CPU ranks than its cores take, or
    more memory than it has by plait's own estimate (device memory per GPU; host memory for all CPU ranks)."""
    if slots is None:
        check_cpu_machine(ranks, predicted.memory.total_bytes - predicted.memory.runtime_reserved_bytes)
        return
    import torch

    capacity = torch.cuda.get_device_properties(0).total_memory
    if predicted.memory.total_bytes > capacity:
        raise ConfigError(f"the plan needs about {format_bytes(predicted.memory.total_bytes)} per GPU (plait's "
                          f"estimate) but this GPU has {format_bytes(capacity)}")


def check_checkpointing(folder: Path | None, at: int, every: int, keep: int, resume: bool, reshard: bool,
                        steps: int, model: ModelSpec, plan: Plan) -> None:
    """Every checkpoint check that can run before a rank starts: the options, a writable folder, and a resumable,
    undamaged checkpoint of this run; ``plan`` has its sequence length filled (a checkpoint names the run's)."""
    assert plan.seq_len > 0, "the caller fills the plan's sequence length"
    if steps < 1 or at < 0 or every < 0 or keep < 1:
        raise ConfigError(f"--steps={steps} and --keep={keep} must be >= 1, --checkpoint-at={at} and "
                          f"--checkpoint-every={every} >= 0")
    check_options(folder, resume, at, every)
    if folder is None:
        return
    from plait.run import checkpoint  # torch: only where a checkpoint folder is given

    if at or every:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder):
                pass
        except OSError as exc:
            raise ConfigError(f"checkpoint folder {str(folder)!r} is not writable ({exc.strerror})") from exc
        check_room(folder, at, every, keep, steps, model, plan)
    if resume:
        identity = checkpoint.RunIdentity(plan=plan.to_dict(), model=model.name,
                                          steps=steps, seed=SEED)
        checkpoint.choose(folder, identity, reshard)
