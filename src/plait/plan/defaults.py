"""One set of defaults for a plan, whether its options come from the command line or from a plan file.

What neither states takes :class:`~plait.plan.plan.Plan`'s field defaults, except:

- ``global_batch``: 128 sequences (a Plan's own default, 1, is no training batch anyone runs);
- ``sp``: on when ``tp > 1`` (Korthikanti et al. 2022: sequence parallelism saves activation memory at the same
  communication volume as plain tensor parallelism);
- data parallelism fills the GPU count when one is known (``--gpus``, whose default is 8, or ``[job] gpus``):
  ``dp = gpus / (tp * pp * cp)``; if one of ``dp_replicate``/``dp_shard`` is stated the other is ``dp`` over it,
  if neither is, every data-parallel rank shards (``dp_shard = dp``) unless ``sharding = "none"`` (then
  ``dp_replicate = dp``). Without a GPU count an unstated degree is 1;
- ``sharding``: ``zero3`` (FSDP) when ``dp_shard > 1``, else ``none``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from plait.errors import ConfigError
from plait.plan.plan import Plan
from plait.schema import build

GPUS = 8
"""GPUs of a command line that does not say (one DGX/HGX node)."""
GLOBAL_BATCH = 128
"""Sequences per step when neither the command line nor the plan file says."""
LAYOUT_OPTIONS = ("tp", "pp", "vpp", "schedule", "cp", "cp_attention", "ep", "dp_replicate", "sharding", "sp", "recompute",
                  "recompute_layers", "global_batch", "seq_len", "precision", "offload_optimizer", "offload_params",
                  "swap_activations", "swap_layers", "dp_sync")
"""The command line's layout options besides ``gpus`` and ``micro_batch`` (:func:`plan_from_options` takes them)."""


def complete_plan(stated: Mapping[str, Any], gpus: int | None, where: str) -> Plan:
    """The plan that ``stated`` (plan fields as given, by a plan file's ``[plan]`` table or the command line)
    describes on ``gpus`` GPUs (``None``: not known), with the defaults above. ``where`` prefixes errors."""
    plan = build(Plan, {"global_batch": GLOBAL_BATCH, **stated}, where)
    replicate, shard = plan.dp_replicate, plan.dp_shard
    if gpus is not None and not {"dp_replicate", "dp_shard"} <= stated.keys():
        if gpus <= 0:
            raise ConfigError(f"gpus={gpus} must be > 0")
        if min(plan.tp, plan.pp, plan.cp) <= 0:
            raise ConfigError(f"tp={plan.tp}, pp={plan.pp} and cp={plan.cp} must be > 0")
        model_parallel = plan.model_parallel  # a replica's GPUs
        if gpus % model_parallel:
            grid = f"sum(stage_tp)*cp={sum(plan.stage_tp)}*{plan.cp}" if plan.stage_tp else \
                f"tp*pp*cp={plan.tp}*{plan.pp}*{plan.cp}"
            raise ConfigError(f"gpus={gpus} must be divisible by {grid}={model_parallel}")
        dp = gpus // model_parallel
        given = "dp_shard" if "dp_shard" in stated else "dp_replicate" if "dp_replicate" in stated else None
        if given is not None:
            value = getattr(plan, given)
            if value <= 0 or dp % value:
                raise ConfigError(f"{given}={value} must divide dp={dp} (gpus={gpus} over tp*pp*cp="
                                  f"{model_parallel})")
            replicate, shard = (dp // shard, shard) if given == "dp_shard" else (replicate, dp // replicate)
        else:
            replicate, shard = (dp, 1) if stated.get("sharding") == "none" else (1, dp)
        if stated.get("sharding") == "none" and shard > 1:
            raise ConfigError(f"dp_replicate={replicate} leaves dp_shard={shard}, which needs a sharding stage "
                              f"(sharding='none' replicates all dp={dp})")
    sharding = stated.get("sharding", "zero3" if shard > 1 else "none")
    return replace(plan, dp_replicate=replicate, dp_shard=shard, sharding=sharding, sp=stated.get("sp", plan.tp > 1))


def plan_from_options(*, gpus: int, **options: object) -> Plan:
    """The plan the layout options describe on ``gpus`` GPUs; options given as ``None`` take the defaults a plan
    file's missing keys take (:mod:`plait.plan.defaults`)."""
    if gpus <= 0:
        raise ConfigError(f"gpus={gpus} must be > 0")
    stated = {name: value for name, value in options.items() if value is not None}
    if stated.get("schedule") == "interleaved" and stated.get("vpp", 1) == 1:
        stated["vpp"] = 2
    return complete_plan(stated, gpus, "options")


def layout_plan(options: Mapping[str, Any]) -> Plan:
    """The plan a command line's layout options describe (by parameter name: ``gpus``, ``micro_batch`` and
    :data:`LAYOUT_OPTIONS`; no ``--micro-batch``: 1)."""
    micro_batch = options["micro_batch"]
    return plan_from_options(gpus=options["gpus"], micro_batch=1 if micro_batch is None else micro_batch,
                             **{k: options[k] for k in LAYOUT_OPTIONS})
