"""What every rank of ``plait run --plan`` runs with: one frozen :class:`WorkerConfig`, written by the launcher
into a JSON file and read by :mod:`plait.run.worker` through :func:`plait.run.config.read_config` (torch-free)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from plait.run.config import ALWAYS, COMMA
from plait.run.uneven import Uneven

SEED = 1234
"""The runs' seed unless one is given (:class:`plait.run.train.TrainConfig` takes it as its default too)."""


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    """One rank's options; the field order is the order of the options on a printed torchrun line."""

    plan: Path
    """plan TOML ([job] model and [plan])"""
    steps: int = field(default=10, metadata={ALWAYS: True})
    """optimizer steps"""
    keep: int = field(default=2, metadata={ALWAYS: True})
    """newest checkpoints kept"""
    on_nonfinite: Literal["stop", "skip"] = field(default="stop", metadata={ALWAYS: True})
    """a step with a non-finite gradient norm: stop (exit code 3) or skip its update"""
    slowdown: tuple[float, ...] = field(default=(), metadata={"form": COMMA})
    """per rank, times slower at compute, e.g. 1,3 (run/slowdown.py)"""
    batch_split: tuple[int, ...] = field(default=(), metadata={"form": COMMA})
    """per data-parallel rank, sequences per step, e.g. 12,4"""
    stage_layers: tuple[int, ...] = field(default=(), metadata={"form": COMMA})
    """per pipeline stage, layers it holds, e.g. 3,1"""
    local_steps: tuple[int, ...] = field(default=(), metadata={"form": COMMA})
    """per data-parallel rank with dp_sync local_sgd, local steps per averaging round, e.g. 16,4 (--steps counts
    the plan's period's steps, whole rounds)"""
    cluster: str | None = None
    """cluster preset or file (default: the plan's [job] cluster); where it spans sites, the replicas all-reduce
    hierarchically (plait.run.sites)"""
    checkpoint_dir: Path | None = None
    """distributed checkpoint folder"""
    checkpoint_at: int = 0
    """save after this many steps (0: never)"""
    checkpoint_every: int = 0
    """save every this many steps (0: never)"""
    trace_dir: Path | None = None
    """profile the last step; each rank writes rank<N>.json (Chrome trace-event format)"""
    resume: bool = False
    """resume from the newest checkpoint in the checkpoint folder"""
    reshard: bool = False
    """resume a checkpoint saved by another plan"""
    full_precision: bool = False
    """fp32 everywhere (parity tests)"""
    dry_run: bool = False
    """build every mesh, group and stage, validate, do not train"""
    async_save: bool = False
    """write checkpoints in the background"""
    metrics: Path | None = None
    """JSON-lines file for per-step metrics"""
    lr: float = 3e-3
    """peak learning rate"""
    seed: int = SEED
    """seed of the weights and the data order"""

    @property
    def uneven(self) -> Uneven:
        """What the run does unevenly (empty: the even run)."""
        return Uneven(slowdown=self.slowdown, batch_split=self.batch_split, stage_layers=self.stage_layers,
                      local_steps=self.local_steps)


def whole_loop_option(args: WorkerConfig) -> str | None:
    """The first ``plait run`` option given that a loop of its own (the TP grid's, the stage-TP one) does not
    implement: checkpoints, traces, slowdowns and uneven splits belong to the worker's main loop."""
    options = [(args.checkpoint_dir is not None, "--checkpoint-dir"), (args.resume, "--resume"),
               (args.trace_dir is not None, "--trace-dir"), (bool(args.slowdown), "--slowdown"),
               (bool(args.batch_split), "--batch-split"), (bool(args.local_steps), "--local-steps"),
               (bool(args.stage_layers), "--stage-layers")]
    return next((option for given, option in options if given), None)
