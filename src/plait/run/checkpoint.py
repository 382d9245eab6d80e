"""Distributed checkpoints with ``torch.distributed.checkpoint`` (DCP).

Model and optimizer state come from ``get_model_state_dict``/``get_optimizer_state_dict``,
which understand DTensor, FSDP2 and DDP; every rank writes its shards in parallel and a
resumed run with the same plan reloads them exactly. The step number travels in the same
checkpoint; data and learning rate are pure functions of it.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from plait.errors import ConfigError
from plait.run.optim import HostOffloadOptimizer


def check_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """Refuse, before training, optimizers whose state ``get_optimizer_state_dict`` cannot map to the model."""
    if type(optimizer).__name__ == "ZeroRedundancyOptimizer":
        raise ConfigError("checkpointing zero1 (ZeroRedundancyOptimizer) is not supported by DCP; "
                          "use zero2/zero3 (FSDP2) or sharding none to checkpoint")
    if isinstance(optimizer, HostOffloadOptimizer):  # its state is keyed by host copies, not parameters
        raise ConfigError("checkpointing offload_optimizer without offload_params is not supported by DCP "
                          "(the optimizer state lives on host copies); set offload_optimizer = false to checkpoint")


def save(directory: Path, container: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    """Write the state after ``step`` optimizer steps."""
    check_optimizer(optimizer)
    state = {
        "model": get_model_state_dict(container),
        "optim": get_optimizer_state_dict(container, optimizer),
        "step": torch.tensor(step),
    }
    dcp.save(state, checkpoint_id=str(directory))


def load(directory: Path, container: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Restore model and optimizer in place; returns the number of steps already taken."""
    check_optimizer(optimizer)
    if not directory.is_dir():
        raise ConfigError(f"checkpoint {str(directory)!r} does not exist")
    state = {
        "model": get_model_state_dict(container),
        "optim": get_optimizer_state_dict(container, optimizer),
        "step": torch.tensor(0),
    }
    dcp.load(state, storage_reader=dcp.FileSystemReader(str(directory)))
    set_model_state_dict(container, state["model"])
    set_optimizer_state_dict(container, optimizer, state["optim"])
    return int(state["step"])
