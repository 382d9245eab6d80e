"""The rules a per-stage plan (:attr:`Plan.stage_recompute`, :attr:`Plan.stage_layers`, :attr:`Plan.stage_sharding`,
:attr:`Plan.stage_tp`) meets beside the uniform plan rules (:mod:`plait.plan.rules`, which also check each stage's own
sharding and TP degree), checked once where a job is built.

A per-stage plan is costed stage by stage (:mod:`plait.cost.per_stage`): each stage as the uniform plan of its own
mode over a model whose even split gives it its layer count. That holds where every layer is alike (no MoE or
local-attention layers placed by index), with one model chunk per rank, under the all-reduce (the only
synchronization the per-stage step assembles).
"""

from __future__ import annotations

from plait.errors import ConfigError
from plait.plan.plan import Plan
from plait.workload.model import ModelSpec

FIELDS = "stage_recompute, stage_layers, stage_sharding and stage_tp"
"""How a refusal names the per-stage fields."""


def check_stages(plan: Plan, model: ModelSpec) -> None:
    """Raise :class:`ConfigError` naming the first rule a per-stage plan breaks (nothing for a uniform plan)."""
    if not plan.per_stage:
        return
    if plan.pp < 2:
        raise ConfigError(f"{FIELDS} need pipeline stages (pp={plan.pp} must be >= 2)")
    if plan.vpp != 1:
        raise ConfigError(f"{FIELDS} take one model chunk per rank (vpp={plan.vpp} must be 1)")
    if not plan.dp_sync.is_allreduce:
        raise ConfigError(f"{FIELDS} are costed under the all-reduce "
                          f"(dp_sync={plan.dp_sync.spec!r} must be allreduce)")
    if plan.stage_sharding and plan.dp_shard == 1:
        raise ConfigError(f"stage_sharding shards over each stage's dp_shard ranks (dp_shard={plan.dp_shard} must be "
                          ">= 2)")
    if plan.stage_tp and plan.tp_mode != "1d":
        raise ConfigError(f"stage_tp={list(plan.stage_tp)} is costed for Megatron 1-D tensor parallelism "
                          f"(tp_mode={plan.tp_mode!r} must be '1d')")
    if plan.stage_layers:
        if model.moe is not None or model.local_attention is not None:
            raise ConfigError(f"stage_layers needs layers that are all alike; {model.name} places MoE or "
                              "local-attention layers by index (leave stage_layers out)")
        if sum(plan.stage_layers) != model.num_layers:
            raise ConfigError(f"stage_layers={list(plan.stage_layers)} sums to {sum(plan.stage_layers)}; it must sum "
                              f"to the model's {model.num_layers} layers")
    layers = stage_layer_list(plan, model.num_layers)
    modes = plan.stage_recompute or (plan.recompute,) * plan.pp
    for stage, (mode, count) in enumerate(zip(modes, layers)):
        if mode == "full" and plan.recompute_layers > count:
            raise ConfigError(f"recompute_layers={plan.recompute_layers} must be <= the {count} layers of stage {stage}")


def stage_layer_list(plan: Plan, num_layers: int) -> tuple[int, ...]:
    """Layers of every stage: :attr:`Plan.stage_layers`, or the even split (the first stages taking the remainder,
    :func:`plait.cost.params.stage_layer_counts`)."""
    if plan.stage_layers:
        return plan.stage_layers
    base, extra = divmod(num_layers, plan.pp)
    return tuple(base + (stage < extra) for stage in range(plan.pp))


def stage_degrees(plan: Plan) -> tuple[int, ...]:
    """Every pipeline stage's TP degree: :attr:`Plan.stage_tp` (a pipeline split whose groups take their own degree,
    the same on all of one group's stages), or ``tp`` on each."""
    return plan.stage_tp or (plan.tp,) * plan.pp


def stage_tp_differs(plan: Plan) -> bool:
    """Whether ``plan``'s stages differ in TP degree (:mod:`plait.run.stage_tp` runs it)."""
    return len(set(plan.stage_tp)) > 1


def stage_tp_refusal(plan: Plan, model: ModelSpec | None = None) -> str | None:
    """Why plait's stage-TP loop (:mod:`plait.run.stage_tp`) cannot run ``plan`` (``None``: it can, or the stages
    share one degree); ``model``, where given, is checked for experts too."""
    if not stage_tp_differs(plan):
        return None
    found = [f"{k}={getattr(plan, k)}" for k in ("dp", "cp", "vpp", "ep", "overlap_chunks") if getattr(plan, k) > 1]
    found += [f"{k}=true" for k in ("sp", "tp_comm_overlap", "offload_optimizer", "offload_params", "swap_activations")
              if getattr(plan, k)]
    found += [f"schedule={plan.schedule!r}"] if plan.schedule not in ("gpipe", "1f1b") else []
    found += [f"precision={plan.precision!r}"] if plan.precision == "fp8" else []
    found += [f"a mixture-of-experts model ({model.name})"] if model is not None and model.moe is not None else []
    if not found:
        return None
    return (f"stage_tp={list(plan.stage_tp)} with {found[0]}: plait's stage-TP loop (plait/run/stage_tp.py) runs "
            "dp = cp = 1 without sp, one chunk per rank, dense models")
