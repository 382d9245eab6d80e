"""Distributed checkpoints with ``torch.distributed.checkpoint`` (DCP) that cannot be lost or silently damaged.

Model and optimizer state come from ``get_model_state_dict``/``get_optimizer_state_dict``, which understand
DTensor, FSDP2 and DDP; every rank writes its shards in parallel. A checkpoint folder holds one published
checkpoint per saved step, ``step-<8 digits>/``:

- it is written as ``.step-<n>.partial/`` and published by one rename once every rank has written and rank 0
  has recorded a manifest and flushed every file to disk (``os.fsync``, then the folder's entry), so a crash
  at any moment leaves the earlier checkpoints as they were; an existing checkpoint is never written into;
- ``manifest.json`` records the plan, the model, the step, the run's length (the learning-rate schedule
  depends on it), the seed (data and schedule are pure functions of step and seed), the library versions,
  and the size and SHA-256 of every file; it is verified before anything is loaded;
- only the newest ``keep`` checkpoints stay;
- an fp16 run's dynamic loss scale is saved beside model and optimizer (``loss_scale``), so a resumed run scales
  as the uninterrupted one would.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from plait.errors import ConfigError
from plait.run.loss_scale import LossScale
from plait.run.optim import HostOffloadOptimizer

MANIFEST = "manifest.json"
LOSS_SCALE = "loss_scale"
"""The state key of fp16's loss scale (:meth:`plait.run.loss_scale.LossScale.state`)."""
CRASH_HOOK = "PLAIT_TEST_CRASH_IN_SAVE"
"""Test hook: rank 0 exits at this phase of a save (``written``: shards on disk, no manifest; ``manifest``:
manifest written, not published)."""


@dataclass(frozen=True, kw_only=True)
class RunIdentity:
    """What a checkpoint must match to be resumed as the same run."""

    plan: dict[str, Any]
    """The plan's fields."""
    model: str
    """The model's name."""
    steps: int
    """Optimizer steps of the whole run (the learning-rate schedule's length)."""
    seed: int
    """Seed of initialisation and data order."""


def check_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """Refuse, before training, optimizers whose state ``get_optimizer_state_dict`` cannot map to the model."""
    if type(optimizer).__name__ == "ZeroRedundancyOptimizer":
        raise ConfigError("checkpointing zero1 (ZeroRedundancyOptimizer) is not supported by DCP; "
                          "use zero2/zero3 (FSDP2) or sharding none to checkpoint")
    periodic = {"PostLocalSGDOptimizer": "local_sgd", "ShardAverage": "local_sgd", "DiLoCo": "diloco",
                "PALSGD": "palsgd", "DreamDDP": "dreamddp", "Crossbow": "crossbow"}
    if type(optimizer).__name__ in periodic:
        method = periodic[type(optimizer).__name__]
        raise ConfigError(f"checkpointing dp_sync={method!r} is not supported yet (its step count and outer state "
                          "are not in DCP's optimizer state); run it without --checkpoint-dir")
    if isinstance(optimizer, HostOffloadOptimizer):  # its state is keyed by host copies, not parameters
        raise ConfigError("checkpointing offload_optimizer without offload_params is not supported by DCP "
                          "(the optimizer state lives on host copies); set offload_optimizer = false to checkpoint")


def choose_on_rank0(root: Path, identity: RunIdentity, reshard: bool) -> Path:
    """:func:`choose` run once, on rank 0 (it reads and hashes every file), its answer or refusal given to every
    rank."""
    answer: list[object] = [None]
    if dist.get_rank() == 0:
        try:
            answer = [choose(root, identity, reshard)]
        except ConfigError as refusal:
            answer = [refusal]
    dist.broadcast_object_list(answer, src=0)
    if isinstance(answer[0], ConfigError):
        raise answer[0]
    return answer[0]  # type: ignore[return-value]


def step_folder(root: Path, step: int) -> Path:
    """Where the checkpoint after ``step`` steps is published."""
    return root / f"step-{step:08d}"


def published(root: Path) -> list[Path]:
    """Published checkpoints under ``root``, oldest first."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-") and p.name[5:].isdigit())


def _digest(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _crash_if(phase: str) -> None:
    if os.environ.get(CRASH_HOOK) == phase:
        os._exit(3)


class Saver:
    """Writes and publishes checkpoints under ``root``, keeping the newest ``keep`` (all ranks hold one).

    ``background``: ``torch.distributed.checkpoint.async_save`` copies the state to host memory and writes it
    from a thread while training goes on (torch/distributed/checkpoint/state_dict_saver.py), over a process
    group of its own so that its collectives never interleave with training's; the checkpoint is published when
    the next save starts or the run ends (:meth:`wait`), so a crash in between loses only that checkpoint."""

    def __init__(self, root: Path, identity: RunIdentity, keep: int, background: bool = False) -> None:
        self.root, self.identity, self.keep = root, identity, keep
        self.group = dist.new_group(backend="gloo") if background else None
        self.pending: tuple[Any, Path, Path, int] | None = None

    def save(self, container: nn.Module, optimizer: torch.optim.Optimizer, step: int,
             scaling: LossScale | None = None) -> Path:
        """Write the state after ``step`` optimizer steps (published now, or by :meth:`wait` in the background),
        with fp16's loss scale where the run has one."""
        self.wait()
        check_optimizer(optimizer)
        final, partial = step_folder(self.root, step), self.root / f".step-{step:08d}.partial"
        if dist.get_rank() == 0:
            if final.exists():
                raise ConfigError(f"checkpoint {str(final)!r} already exists; it is never written over")
            shutil.rmtree(partial, ignore_errors=True)  # a save that died earlier
        dist.barrier()
        import torch.distributed.checkpoint as dcp  # here: DCP takes ~0.1 s to import, and most runs never save
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

        state = {"model": get_model_state_dict(container), "optim": get_optimizer_state_dict(container, optimizer),
                 "step": torch.tensor(step)}
        if scaling is not None:
            state[LOSS_SCALE] = scaling.state()
        if self.group is None:
            dcp.save(state, checkpoint_id=str(partial))
            self._finish(partial, final, step)
        else:
            future = dcp.async_save(state, checkpoint_id=str(partial), process_group=self.group)
            self.pending = (future, partial, final, step)
        return final

    def wait(self) -> None:
        """Publish the checkpoint being written in the background, once every rank has written its part."""
        if self.pending is not None:
            future, partial, final, step = self.pending
            self.pending = None
            future.result()
            self._finish(partial, final, step)

    def _finish(self, partial: Path, final: Path, step: int) -> None:
        dist.barrier()
        if dist.get_rank() == 0:
            _publish(partial, final, step, self.identity)
            for old in published(self.root)[:-self.keep]:
                shutil.rmtree(old)
        dist.barrier()


def _publish(partial: Path, final: Path, step: int, identity: RunIdentity) -> None:
    _crash_if("written")
    files = {p.name: {"bytes": p.stat().st_size, "sha256": _digest(p)} for p in sorted(partial.iterdir())}
    manifest = {"step": step, "plan": identity.plan, "model": identity.model, "steps": identity.steps,
                "seed": identity.seed, "torch": torch.__version__, "files": files}
    (partial / MANIFEST).write_text(json.dumps(manifest, indent=1))
    for p in partial.iterdir():
        _fsync(p)
    _fsync(partial)
    _crash_if("manifest")
    os.rename(partial, final)
    _fsync(final.parent)


def problem(folder: Path) -> str | None:
    """What is wrong with a published checkpoint (a missing, truncated or changed file), or ``None``."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        return f"no readable {MANIFEST} ({exc.__class__.__name__})"
    for name, want in manifest["files"].items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != want["bytes"] or _digest(path) != want["sha256"]:
            return f"{name} does not match its checksum"
    return None


def choose(root: Path, identity: RunIdentity, reshard: bool) -> Path:
    """The newest published checkpoint under ``root``, verified, and refused with one line when it is damaged
    (naming the newest valid one) or belongs to another run (another plan unless ``reshard``, another model, run
    length or seed)."""
    found = published(root)
    if not found:
        raise ConfigError(f"no checkpoint to resume in {str(root)!r} (expected step-<n> folders)")
    newest = found[-1]
    wrong = problem(newest)
    if wrong:
        valid = next((str(f) for f in reversed(found[:-1]) if problem(f) is None), None)
        offer = f"; the newest valid one is {valid!r}: move {newest.name} away to resume from it" if valid else ""
        raise ConfigError(f"checkpoint {str(newest)!r} is damaged ({wrong}){offer}")
    manifest = json.loads((newest / MANIFEST).read_text())
    for what, saved, now in (("model", manifest["model"], identity.model), ("steps", manifest["steps"], identity.steps),
                             ("seed", manifest["seed"], identity.seed)):
        if saved != now:
            raise ConfigError(f"checkpoint {newest.name} is of a run with {what}={saved!r}, this run has {what}={now!r}"
                              + (" (the learning-rate schedule follows the run's length)" if what == "steps" else ""))
    changed = sorted(k for k in identity.plan if manifest["plan"].get(k) != identity.plan[k])
    if changed and not reshard:
        names = ", ".join(f"{k}={manifest['plan'].get(k)!r}->{identity.plan[k]!r}" for k in changed)
        raise ConfigError(f"checkpoint {newest.name} was saved by another plan ({names}); pass --reshard to load it "
                          "into this plan's layout")
    if manifest["step"] >= identity.steps:
        raise ConfigError(f"checkpoint {newest.name} is at step {manifest['step']}, the run ends at --steps "
                          f"{identity.steps}: nothing left to train")
    return newest


def load(folder: Path, container: nn.Module, optimizer: torch.optim.Optimizer,
         scaling: LossScale | None = None) -> int:
    """Restore model and optimizer in place from a checkpoint :func:`choose` accepted; returns its step. ``scaling``
    takes back fp16's loss scale where the checkpoint holds one (one saved by a bf16 or fp32 run, resumed by
    ``--reshard`` as fp16, holds none: the scale starts at its initial value)."""
    check_optimizer(optimizer)
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    state = {"model": get_model_state_dict(container), "optim": get_optimizer_state_dict(container, optimizer),
             "step": torch.tensor(0)}
    reader = dcp.FileSystemReader(str(folder))
    if scaling is not None and LOSS_SCALE in reader.read_metadata().state_dict_metadata:
        state[LOSS_SCALE] = scaling.state()
    dcp.load(state, storage_reader=reader)
    set_model_state_dict(container, state["model"])
    set_optimizer_state_dict(container, optimizer, state["optim"])
    if LOSS_SCALE in state:
        scaling.load_state(state[LOSS_SCALE])  # type: ignore[union-attr]
    return int(state["step"])
