"""Validation of a Plan against its model and cluster.

Each rule is a small named function that returns ``None`` or a one-line reason naming
the value and the rule (``tp=3 must divide num_heads=32``). The estimator raises the
first reason as a :class:`ConfigError`; the planner records it as the candidate's
infeasibility reason (STYLE.md rules 9 and 11).
"""

from __future__ import annotations

from collections.abc import Callable

from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.plan.plan import Plan
from plait.workload.model import ModelSpec

Rule = Callable[[Plan, ModelSpec, Cluster], "str | None"]


def _degrees_positive(plan: Plan, model: ModelSpec, cluster: Cluster) -> str | None:
    for name in ("tp", "pp", "vpp", "cp", "ep", "dp_replicate", "dp_shard", "micro_batch", "global_batch"):
        if getattr(plan, name) <= 0:
            return f"{name}={getattr(plan, name)} must be > 0"
    if plan.seq_len < 0:
        return f"seq_len={plan.seq_len} must be > 0"
    return None


def _tp_divides_heads(plan: Plan, model: ModelSpec, cluster: Cluster) -> str | None:
    if model.num_heads % plan.tp:
        return f"tp={plan.tp} must divide num_heads={model.num_heads}"
    kv = model.num_kv_heads
    if not model.mla and kv % plan.tp and plan.tp % kv:
        return f"tp={plan.tp} must divide num_kv_heads={kv} (or be a multiple of it)"
    if model.ffn_hidden_size % plan.tp:
        return f"tp={plan.tp} must divide ffn_hidden_size={model.ffn_hidden_size}"
    if model.moe and model.moe.expert_ffn_hidden_size % plan.tp:
        return f"tp={plan.tp} must divide moe.expert_ffn_hidden_size={model.moe.expert_ffn_hidden_size}"
    return None


def _pipeline_fits_layers(plan: Plan, model: ModelSpec, cluster: Cluster) -> str | None:
    chunks = plan.pp * plan.vpp
    if chunks > model.num_layers:
        return f"pp*vpp={chunks} must be <= num_layers={model.num_layers}"
    if plan.vpp > 1 and plan.schedule != "interleaved":
        return f"vpp={plan.vpp} needs schedule='interleaved' (got {plan.schedule!r})"
    if plan.schedule == "interleaved" and plan.pp > 1 and plan.num_micro_batches % plan.pp:
        return (f"interleaved schedule needs micro-batches per step ({plan.num_micro_batches}) "
                f"divisible by pp={plan.pp}")
    if plan.recompute == "full" and plan.recompute_layers > -(-model.num_layers // plan.pp):
        return f"recompute_layers={plan.recompute_layers} must be <= layers per stage={-(-model.num_layers // plan.pp)}"
    return None


def _batch_divides(plan: Plan, model: ModelSpec, cluster: Cluster) -> str | None:
    unit = plan.micro_batch * plan.dp
    if plan.global_batch % unit:
        return f"global_batch={plan.global_batch} must be divisible by micro_batch*dp={plan.micro_batch}*{plan.dp}={unit}"
    return None


def _context_parallel(plan: Plan, model: ModelSpec, cluster: Cluster) -> str | None:
    seq = plan.seq_len or model.seq_len
    if plan.cp > 1 and seq % (2 * plan.cp):
        return f"seq_len={seq} must be divisible by 2*cp={2 * plan.cp} (load-balanced causal split)"
    return None


def _expert_parallel(plan: Plan, model: ModelSpec, cluster: Cluster) -> str | None:
    if plan.ep == 1:
        return None
    if not model.moe:
        return f"ep={plan.ep} needs a mixture-of-experts model ({model.name} is dense)"
    if model.moe.num_experts % plan.ep:
        return f"ep={plan.ep} must divide moe.num_experts={model.moe.num_experts}"
    if (plan.dp * plan.cp) % plan.ep:
        return f"ep={plan.ep} must divide dp*cp={plan.dp * plan.cp}"
    return None


def _sharding_group(plan: Plan, model: ModelSpec, cluster: Cluster) -> str | None:
    if plan.sharding == "none" and plan.dp_shard > 1:
        return f"dp_shard={plan.dp_shard} needs sharding zero1/zero2/zero3 (sharding='none')"
    if plan.offload_params and plan.sharding != "zero3":
        return f"offload_params needs sharding='zero3' (got {plan.sharding!r})"
    return None


def _hardware_supports(plan: Plan, model: ModelSpec, cluster: Cluster) -> str | None:
    if plan.precision == "fp8" and "fp8" not in cluster.accelerator.peak_tflops:
        return f"precision=fp8 is not supported by {cluster.accelerator.name}"
    if plan.num_gpus > cluster.max_gpus:
        return f"plan needs {plan.num_gpus} GPUs but cluster {cluster.name} has {cluster.max_gpus}"
    return None


RULES: tuple[tuple[str, Rule], ...] = (
    ("degrees-positive", _degrees_positive),
    ("tp-divides-heads", _tp_divides_heads),
    ("pipeline-fits-layers", _pipeline_fits_layers),
    ("batch-divides", _batch_divides),
    ("context-parallel", _context_parallel),
    ("expert-parallel", _expert_parallel),
    ("sharding-group", _sharding_group),
    ("hardware-supports", _hardware_supports),
)


def first_violation(plan: Plan, model: ModelSpec, cluster: Cluster) -> tuple[str, str] | None:
    """The first broken rule as ``(rule name, reason)``, or ``None`` when the plan is valid."""
    for name, rule in RULES:
        reason = rule(plan, model, cluster)
        if reason:
            return name, reason
    return None


def check_plan(plan: Plan, model: ModelSpec, cluster: Cluster, num_gpus: int | None = None) -> None:
    """Raise :class:`ConfigError` naming the first broken rule."""
    found = first_violation(plan, model, cluster)
    if found:
        raise ConfigError(found[1])
    if num_gpus is not None and plan.num_gpus != num_gpus:
        raise ConfigError(
            f"pp*dp*cp*tp={plan.pp}*{plan.dp}*{plan.cp}*{plan.tp}={plan.num_gpus} must equal gpus={num_gpus}")


def warnings(plan: Plan, model: ModelSpec, cluster: Cluster) -> list[str]:
    """Options that have no effect or leave the fast path (STYLE.md rule 11: warn)."""
    out = []
    if plan.sp and plan.tp == 1:
        out.append("sp has no effect with tp=1")
    if plan.pp == 1 and (plan.schedule != "1f1b" or plan.vpp > 1):
        out.append(f"schedule={plan.schedule} has no effect with pp=1")
    if plan.sharding != "none" and plan.dp_shard == 1:
        out.append(f"sharding={plan.sharding} has no effect with dp_shard=1")
    if plan.recompute != "full" and plan.recompute_layers >= 0:
        out.append("recompute_layers has no effect unless recompute='full'")
    if plan.tp > cluster.scale_up_domain_gpus:
        out.append(f"tp={plan.tp} crosses the scale-up domain ({cluster.scale_up_domain_gpus} GPUs): TP traffic goes over the network")
    return out
