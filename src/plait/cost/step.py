"""Assemble one estimate: memory of the most loaded stage and the step-time breakdown.

step = slowest stage x micro-batches + pipeline bubble + exposed data-parallel sync
+ optimizer step. Components of the slowest stage are scaled by the micro-batch count
so that the breakdown sums to the step time (see :mod:`plait.cost.pipeline`).
"""

from __future__ import annotations

from plait.cost.dataparallel import exposed_sync_s, optimizer_step_s
from plait.cost.estimate import Estimate, TimeBreakdown
from plait.cost.flops import model_flops_per_token
from plait.cost.memory import peak_memory
from plait.cost.params import stage_params
from plait.cost.pipeline import StageTime, pipeline_time_s
from plait.cost.setup import AttentionKernel, Setup
from plait.cost.stage import stage_cost
from plait.hardware.cluster import Cluster
from plait.plan import rules
from plait.plan.plan import Plan
from plait.workload.model import ModelSpec


def _stages_to_cost(plan: Plan) -> list[int]:
    """First, last and (when they differ) one middle stage stand for all stages."""
    return sorted({0, plan.pp // 2, plan.pp - 1})


def estimate(model: ModelSpec, cluster: Cluster, plan: Plan, *,
             attention_kernel: AttentionKernel = "flash", check: bool = True) -> Estimate:
    """Predict memory and step time of ``plan`` for ``model`` on ``cluster``."""
    plan = plan.with_seq_len(model.seq_len)
    if check:
        rules.check_plan(plan, model, cluster)
    setup = Setup(model=model, cluster=cluster, plan=plan, attention_kernel=attention_kernel)
    indices = _stages_to_cost(plan)
    costs = {i: stage_cost(setup, i) for i in indices}
    middle = plan.pp - len(indices) + 1 if plan.pp > 2 else 0
    weights = {i: (middle if 0 < i < plan.pp - 1 else 1) for i in indices}
    times = [StageTime(costs[i].forward_s, costs[i].backward_s) for i in indices for _ in range(weights[i])]
    busy, bubble = pipeline_time_s(plan, times)
    slowest = max(indices, key=lambda i: costs[i].total_s)
    m = plan.num_micro_batches
    parts = {k: m * (costs[slowest].forward[k] + costs[slowest].backward[k]) for k in costs[slowest].forward}
    params = stage_params(setup, slowest)
    dp = exposed_sync_s(setup, params, costs[slowest].backward_s, costs[slowest].forward_s)
    breakdown = TimeBreakdown(
        compute_s=parts["compute"], recompute_s=parts["recompute"], tp_comm_s=parts["tp_comm"],
        cp_comm_s=parts["cp_comm"], ep_comm_s=parts["ep_comm"], pp_p2p_s=parts["pp_p2p"],
        fsdp_comm_s=parts["fsdp_comm"], pp_bubble_s=bubble, dp_comm_s=dp,
        optimizer_s=optimizer_step_s(setup, params),
    )
    assert abs(sum(parts.values()) - busy) <= 1e-9 * max(busy, 1.0)
    tokens = plan.global_batch * plan.seq_len
    model_flops = model_flops_per_token(setup) * tokens
    return Estimate(
        model_name=model.name,
        cluster_name=cluster.name,
        plan=plan,
        memory=peak_memory(setup),
        time=breakdown,
        tokens_per_step=tokens,
        model_flops_per_step=model_flops,
        hardware_flops_per_step=model_flops * _recompute_factor(setup),
        peak_flops_per_gpu=cluster.accelerator.peak_flops("bf16"),
        price_per_gpu_hour_usd=cluster.price_per_gpu_hour_usd,
        warnings=rules.warnings(plan, model, cluster),
    )


def _recompute_factor(setup: Setup) -> float:
    """HFU/MFU ratio: full recompute adds one forward (4/3 of model FLOPs) on recomputed layers."""
    plan, model = setup.plan, setup.model
    if plan.recompute != "full":
        return 1.0
    layers = -(-model.num_layers // plan.pp)
    share = 1.0 if plan.recompute_layers < 0 else min(plan.recompute_layers, layers) / layers
    return 1.0 + share / 3.0
