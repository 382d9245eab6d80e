"""Uneven work on ranks of unequal speed: the options, their checks and the loss weight (torch-free).

Four options of ``plait run``'s worker (``plait run`` takes the first three, and all four from a mixed plan file,
:mod:`plait.run.mixed_run`):

- ``--slowdown 1,3``: rank r emulates a device ``f_r`` times slower at compute (:mod:`plait.run.slowdown`);
- ``--batch-split 12,4``: sequences per step of each data-parallel rank, in proportion to speed as Poplar
  assigns per-GPU batch sizes under DDP and ZeRO (Zhang et al. 2023, "Poplar: Efficient Scaling of
  Distributed DNN Training on Heterogeneous GPU Clusters", Sec. 4);
- ``--stage-layers 3,1``: layers of each pipeline stage, the fast rank taking more, as Metis, AMP and FlashFlex
  partition layers over heterogeneous stages (:func:`plait.run.pipeline.stage_layers`);
- ``--local-steps 16,4``: with ``local_sgd``, each data-parallel rank's local steps per averaging round, the fast
  rank taking more (000-17, "Biased Local SGD for Efficient Deep Learning on Heterogeneous Systems").

Each entry list is one comma-separated string on the command line, parsed and checked here once, before any
rank starts (``plait run``) and again in each rank (the worker), with the same messages.

Gradient equality of an uneven split (:func:`loss_weight`). The even run's loss is the mean token loss over all
``G = global_batch`` sequences, ``L = (1/G) sum_i l_i``. Rank r holds ``b_r`` of them (``sum_r b_r = G``) and
computes its local mean ``L_r = (1/b_r) sum_{i in r} l_i`` (its micro-batches' means divided by their count, as
in :mod:`plait.run.train`). DDP and FSDP2 average gradients over the ``dp`` ranks (Li et al. 2020, Sec. 3.2;
FSDP2's reduce-scatter divides by the group size), so a rank that back-propagates ``w_r L_r`` contributes
``(1/dp) sum_r w_r grad L_r``. With ``w_r = dp b_r / G`` that is ``sum_r (b_r / G) grad L_r = (1/G) sum_i
grad l_i = grad L``: the even run's gradient. The even split has ``b_r = G/dp``, so ``w_r = 1`` and nothing
changes. The same weight makes the logged loss the global mean: the worker averages the ranks' losses over dp
(:func:`plait.run.train.mean_over_dp`), and ``(1/dp) sum_r w_r L_r = (1/G) sum_r b_r L_r = L``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeVar

from plait.errors import ConfigError
from plait.plan.mixed import uneven_batch_refusal
from plait.plan.plan import Plan

Number = TypeVar("Number", int, float)


@dataclass(frozen=True, kw_only=True)
class Uneven:
    """What a run does unevenly; every field empty is the plain (even, equal-speed) run."""

    slowdown: tuple[float, ...] = ()
    """Per rank (global rank order): how many times slower than this CPU the rank computes (>= 1)."""
    batch_split: tuple[int, ...] = ()
    """Per data-parallel rank (``Mesh.dp_rank`` order): sequences per optimizer step."""
    stage_layers: tuple[int, ...] = ()
    """Per pipeline stage: transformer layers it holds."""
    local_steps: tuple[int, ...] = ()
    """Per data-parallel rank, with ``dp_sync = local_sgd``: local steps between averagings (each rank averages
    after its own ``local_steps``, all ranks in the same rounds: per-group local SGD, 000-17)."""


def parse_list(text: str | None, flag: str, kind: type[Number]) -> tuple[Number, ...]:
    """``"12,4"`` as ``(12, 4)``; ``None`` or an empty string as ``()``."""
    if not text:
        return ()
    try:
        return tuple(kind(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(f"{flag}={text!r} must be comma-separated {kind.__name__}s, e.g. {flag} 12,4") from None


def parse_uneven(slowdown: str | None, batch_split: str | None, stage_layers: str | None,
                 local_steps: str | None = None) -> Uneven:
    """The command-line strings as one :class:`Uneven`."""
    return Uneven(slowdown=parse_list(slowdown, "--slowdown", float),
                  batch_split=parse_list(batch_split, "--batch-split", int),
                  stage_layers=parse_list(stage_layers, "--stage-layers", int),
                  local_steps=parse_list(local_steps, "--local-steps", int))


def check_uneven(uneven: Uneven, plan: Plan, num_layers: int, micro_batches: tuple[int, ...] = ()) -> None:
    """Refuse, by name, what this runtime does not run unevenly; silent for a runnable request. ``micro_batches``:
    each data-parallel rank's own micro-batch, where a mixed plan's groups run their own
    (:func:`plait.plan.mixed.replica_micro_batches`; empty: the plan's on every rank)."""
    if uneven.slowdown:
        _check_slowdown(uneven.slowdown, plan)
    if uneven.batch_split:
        _check_batch_split(uneven.batch_split, plan, micro_batches or (plan.micro_batch,) * plan.dp)
    if uneven.stage_layers:
        _check_stage_layers(uneven.stage_layers, plan, num_layers)
    if uneven.local_steps:
        _check_local_steps(uneven.local_steps, plan)


def _check_slowdown(factors: tuple[float, ...], plan: Plan) -> None:
    text = ",".join(f"{f:g}" for f in factors)
    if len(factors) != plan.num_gpus:
        raise ConfigError(f"--slowdown {text}: one factor per rank, {plan.num_gpus} ranks")
    if any(not 1.0 <= f < math.inf for f in factors):
        raise ConfigError(f"--slowdown {text}: each factor must be finite and >= 1 (a rank can only be made slower)")
    refusal = slowdown_refusal(plan)
    if refusal:
        raise ConfigError(f"--slowdown with {refusal}")


def slowdown_refusal(plan: Plan) -> str | None:
    """Why ranks of ``plan`` cannot be slowed (``None``: they can)."""
    for axis in ("tp", "cp", "ep"):
        if getattr(plan, axis) > 1:
            return (f"{axis}={getattr(plan, axis)}: runs with dp_replicate, dp_shard and pp only (collectives inside "
                    "each block would be slowed with the compute)")
    return None


def _check_batch_split(split: tuple[int, ...], plan: Plan, micro_batches: tuple[int, ...]) -> None:
    text = ",".join(map(str, split))
    if len(split) != plan.dp:
        raise ConfigError(f"--batch-split {text}: one entry per data-parallel rank, dp={plan.dp}")
    if sum(split) != plan.global_batch:
        raise ConfigError(f"--batch-split {text}: entries sum to {sum(split)}, must sum to "
                          f"global_batch={plan.global_batch}")
    if any(b < mb or b % mb for b, mb in zip(split, micro_batches, strict=True)):
        wanted = (f"its rank's micro-batch ({','.join(map(str, micro_batches))})" if len(set(micro_batches)) > 1
                  else f"micro_batch={micro_batches[0]}")
        raise ConfigError(f"--batch-split {text}: each entry must be a positive multiple of {wanted}")
    refusal = uneven_batch_refusal(plan)
    if refusal:
        raise ConfigError(f"--batch-split {text}: {refusal}")


def _check_stage_layers(layers: tuple[int, ...], plan: Plan, num_layers: int) -> None:
    text = ",".join(map(str, layers))
    stages = plan.pp * plan.vpp
    if plan.pp == 1:
        raise ConfigError(f"--stage-layers {text}: the plan has no pipeline (pp=1)")
    if len(layers) != stages:
        raise ConfigError(f"--stage-layers {text}: one entry per pipeline stage, pp*vpp={stages}")
    if sum(layers) != num_layers:
        raise ConfigError(f"--stage-layers {text}: entries sum to {sum(layers)}, must sum to the model's "
                          f"num_layers={num_layers}")
    if min(layers) < 1:
        raise ConfigError(f"--stage-layers {text}: each stage must hold at least one layer")


def _check_local_steps(steps: tuple[int, ...], plan: Plan) -> None:
    text = ",".join(map(str, steps))
    if not plan.dp_sync.group_local_steps:
        raise ConfigError(f"--local-steps {text}: takes dp_sync local_sgd (got {plan.dp_sync.spec!r})")
    if len(steps) != plan.dp:
        raise ConfigError(f"--local-steps {text}: one entry per data-parallel rank, dp={plan.dp}")
    if min(steps) < 1:
        raise ConfigError(f"--local-steps {text}: each entry must be >= 1")


def rank_steps(steps: int, every: int, local_steps: tuple[int, ...], dp_rank: int) -> int:
    """Optimizer steps data-parallel rank ``dp_rank`` runs when a run of ``steps`` steps at the plan's period
    ``every`` gives each rank its own ``local_steps``: the same number of averaging rounds, ``steps / every``, on
    every rank (``steps`` whole rounds: :func:`check_rounds`); ``steps`` without per-rank local steps."""
    if not local_steps:
        return steps
    return steps // every * local_steps[dp_rank]


def check_rounds(steps: int, plan: Plan, uneven: Uneven, *, checkpointing: bool = False) -> None:
    """With per-rank local steps the ranks run whole averaging rounds (each averages once a round, so their
    collectives pair up): ``steps`` must be a multiple of the plan's period; and no checkpoints (a save is one
    collective at one step number, which ranks that step apart do not share)."""
    if uneven.local_steps and checkpointing:
        raise ConfigError("--local-steps: ranks that take their own local steps are not checkpointed (a save is "
                          "one collective at one step number); leave --checkpoint-dir out")
    if uneven.local_steps and (steps < plan.dp_sync.every or steps % plan.dp_sync.every):
        raise ConfigError(f"--steps={steps}: with per-rank local steps the ranks run whole averaging rounds: a "
                          f"multiple of the plan's period every={plan.dp_sync.every}")


def layer_counts(num_layers: int, num_stages: int, counts: tuple[int, ...] = ()) -> tuple[int, ...]:
    """Layers of each pipeline stage: ``counts`` (checked by :func:`check_uneven`), or as even as possible, the first
    stages taking the remainder (the estimator's split)."""
    if not counts:
        base, extra = divmod(num_layers, num_stages)
        counts = tuple(base + (1 if stage < extra else 0) for stage in range(num_stages))
    assert len(counts) == num_stages and sum(counts) == num_layers, (counts, num_stages, num_layers)
    return counts


def rank_rows(split: tuple[int, ...], dp_rank: int, global_batch: int, dp: int) -> tuple[int, int]:
    """[start, stop) rows of the global batch that data-parallel rank ``dp_rank`` trains on (even without a
    split)."""
    if not split:
        per_rank = global_batch // dp
        return dp_rank * per_rank, (dp_rank + 1) * per_rank
    start = sum(split[:dp_rank])
    return start, start + split[dp_rank]


def loss_weight(split: tuple[int, ...], dp_rank: int, global_batch: int, dp: int, averaged: bool = True) -> float:
    """``dp * b_r / G``: the factor on rank r's local mean loss that makes the dp-averaged gradient the global
    batch's (module docstring); 1 without a split, or where gradients are not ``averaged`` over the replicas
    (local SGD: each replica steps on its own mean loss)."""
    if not split or not averaged:
        return 1.0
    return dp * split[dp_rank] / global_batch


def argv(uneven: Uneven) -> list[str]:
    """The worker's command-line options for ``uneven`` (what ``plait run`` passes through)."""
    out: list[str] = []
    for flag, values in (("--slowdown", uneven.slowdown), ("--batch-split", uneven.batch_split),
                         ("--stage-layers", uneven.stage_layers), ("--local-steps", uneven.local_steps)):
        if values:
            out += [flag, ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)]
    return out
