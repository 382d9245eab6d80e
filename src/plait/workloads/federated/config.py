"""The run configuration of the federated toy's ranks (:mod:`.worker`) and of its one-process reference
(:mod:`.toy`): one frozen dataclass, read by :func:`plait.run.config.read_config` (torch-free, so the CLI writes what
the ranks read without importing the runtime)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, kw_only=True)
class FederatedRunConfig:
    """A federation of one server and ``clients`` clients training an MLP on synthetic non-iid data."""

    methods: tuple[str, ...] = ("pflego", "fedavg")
    """methods run one after the other (pflego, fedavg)"""
    clients: int = 3
    """clients (one rank each, after the server's rank 0)"""
    participation: float = 1.0
    """fraction of the clients selected per round"""
    local_steps: int = 5
    """steps per selected client per round"""
    rounds: int = 10
    """rounds"""
    samples: int = 64
    """samples per client (every step is full-batch)"""
    inputs: int = 8
    """input features"""
    body: tuple[int, ...] = (16,)
    """hidden widths of the shared body"""
    classes: int = 4
    """classes"""
    lr: float = 0.1
    """step size of the shared weights"""
    head_lr: float = 0.1
    """step size of PFLEGO's head steps before the joint step (the joint step's: lr x clients / selected)"""
    seed: int = 0
    """seed of the data, the weights and the selections"""
    reference: int = 0
    """run in one process (any value but 0)"""
    out: Path
    """JSON file rank 0 writes"""
