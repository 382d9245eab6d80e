"""The run configuration of the GLM worker (:mod:`.worker`): one frozen dataclass, read by
:func:`plait.run.config.read_config` (torch-free, so the CLI builds what the ranks read without the runtime)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, kw_only=True)
class GlmRunConfig:
    """A generated GLM data set and the training the ranks run on it."""

    loss: str = "logistic"
    """squared, logistic or hinge"""
    samples: int = 256
    """examples generated"""
    features: int = 64
    """features per example"""
    density: float = 1.0
    """fraction of features an example holds"""
    batch: int = 16
    """examples per SGD step (the group's)"""
    learning_rate: float = 0.1
    """SGD's step size"""
    l2: float = 0.0
    """L2 regularisation"""
    steps: int = 10
    """SGD steps of each method"""
    scd_epochs: int = 5
    """coordinate-descent epochs (squared loss only; 0: none)"""
    scd_block: int = 8
    """coordinates one worker updates at once from the same residual (the GPU's concurrent updates)"""
    seed: int = 0
    """seed of the data, the weights and the coordinate orders"""
    out: Path
    """JSON file rank 0 writes"""
