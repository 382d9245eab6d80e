"""One estimate: a batch of one plan through :func:`plait.cost.batch.evaluate_batch`."""

from __future__ import annotations

from plait.cost.batch import TIME_ITEMS, evaluate_batch
from plait.cost.estimate import Estimate, MemoryBreakdown, TimeBreakdown
from plait.cost.memory import MEMORY_ITEMS
from plait.cost.framework import DEFAULT, Framework
from plait.hardware.cluster import Cluster
from plait.plan import rules
from plait.plan.columns import PlanColumns
from plait.plan.plan import Plan
from plait.workload.model import ModelSpec


def estimate(model: ModelSpec, cluster: Cluster, plan: Plan, *,
             framework: Framework = DEFAULT, check: bool = True) -> Estimate:
    """Predict memory and step time of ``plan`` for ``model`` on ``cluster``."""
    plan = plan.with_seq_len(model.seq_len)
    if check:
        rules.check_plan(plan, model, cluster)
    result = evaluate_batch(model, cluster, PlanColumns.from_plans([plan]), framework)
    return estimate_from_batch(model, cluster, result, 0)


def estimate_from_batch(model: ModelSpec, cluster: Cluster, result, row: int) -> Estimate:  # type: ignore[no-untyped-def]
    """Row ``row`` of a :class:`~plait.cost.batch.BatchResult` as an Estimate."""
    plan = result.cols.plan(row)
    mem = result.memory
    memory = MemoryBreakdown(
        stage=int(result.memory_stage[row]),
        capacity_bytes=cluster.accelerator.memory_bytes,
        inflight_micro_batches=float(mem["inflight"][row]),
        **{f"{k}_bytes": float(mem[k][row]) for k in MEMORY_ITEMS},
    )
    time = TimeBreakdown(**{f"{k}_s": float(result.time[k][row]) for k in TIME_ITEMS})
    tokens = plan.global_batch * plan.seq_len
    model_flops = float(result.model_flops_per_token[row]) * tokens
    return Estimate(
        model_name=model.name, cluster_name=cluster.name, plan=plan, memory=memory, time=time,
        tokens_per_step=tokens, model_flops_per_step=model_flops,
        hardware_flops_per_step=model_flops * float(result.recompute_factor[row]),
        peak_flops_per_gpu=cluster.accelerator.peak_flops("fp8" if plan.precision == "fp8" else "bf16"),
        price_per_gpu_hour_usd=cluster.price_per_gpu_hour_usd,
        warnings=rules.warnings(plan, model, cluster),
    )
