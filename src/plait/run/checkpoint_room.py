"""Checkpoint room: the bytes one checkpoint of plait's runtime takes, how many saves a run makes, and whether its
folder holds them, checked before a rank starts (torch-free)."""

from __future__ import annotations

import shutil
from pathlib import Path

from plait.cost.memory import optimizer_bytes_per_param
from plait.errors import ConfigError
from plait.plan.columns import PlanColumns
from plait.plan.plan import Plan
from plait.units import format_bytes
from plait.workload.model import ModelSpec


def check_options(folder: Path | None, resume: bool, at: int, every: int) -> None:
    """Resuming or saving needs a checkpoint folder (``plait run`` before launch, without torch; each rank when
    started alone)."""
    if folder is None and (resume or at or every):
        raise ConfigError("--resume, --checkpoint-at and --checkpoint-every need --checkpoint-dir")


def checkpoint_bytes(model: ModelSpec, plan: Plan) -> float:
    """Bytes of one checkpoint of plait's runtime: its fp32 parameters are the master copy (bf16 is an autocast or
    FSDP2 compute dtype), so a checkpoint is the cost model's optimizer state per parameter — fp32 master, AdamW
    two moments or SGD one momentum buffer (:func:`plait.cost.memory.optimizer_bytes_per_param`) — each written
    once however it is sharded or replicated (DCP deduplicates replicas)."""
    return model.total_params() * float(optimizer_bytes_per_param(PlanColumns.one(plan)))


def checkpoint_saves(at: int, every: int, steps: int) -> int:
    """Saves of a run of ``steps`` steps: after step ``at`` and every ``every`` steps (0: never), a step that is
    both saved once; counted without walking the steps (a user may ask for 2^63)."""
    periodic = steps // every if every else 0
    return periodic + (1 if 1 <= at <= steps and not (every and at % every == 0) else 0)


def check_room(folder: Path, at: int, every: int, keep: int, steps: int, model: ModelSpec, plan: Plan) -> None:
    """Refuse a run whose checkpoints cannot fit: at its peak the folder holds ``keep`` of this run's checkpoints
    plus the one being written; what is already there is pruned as new ones are published."""
    saves = checkpoint_saves(at, every, steps)
    size = checkpoint_bytes(model, plan)
    existing = published_bytes(folder)
    # older checkpoints are pruned only after a new one is published: the first save always needs its own room
    need = max(size, size * min(saves, keep + 1) - existing) if saves else 0.0
    free = shutil.disk_usage(folder).free
    if need > free:
        raise ConfigError(f"checkpoint folder {str(folder)!r} has {format_bytes(free)} free; {saves} save(s) of "
                          f"{format_bytes(size)} each, {keep} kept, need {format_bytes(need)} more")


def published_bytes(folder: Path) -> int:
    """Bytes of the checkpoints already published in ``folder`` (``step-<n>/``), which the run prunes as it publishes
    its own; other files there stay and free nothing (and a folder such as ``/`` is not walked)."""
    from plait.run import checkpoint  # torch: only where a checkpoint folder is given

    total = 0
    try:
        for step in checkpoint.published(folder):
            total += sum(f.stat().st_size for f in step.rglob("*") if f.is_file())
    except OSError as exc:
        raise ConfigError(f"checkpoint folder {str(folder)!r} cannot be read ({exc.strerror})") from exc
    return total
