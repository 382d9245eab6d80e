"""Memory per GPU of one pipeline stage: model states, activations, buffers, overheads.

Model states follow ZeRO (Rajbhandari et al. 2020, Sec. 3.1 and 5.1): mixed-precision
Adam keeps 2-byte weights, gradients in the reduction dtype, and ``K = 12`` bytes of
fp32 master weights and two moments per parameter; ZeRO-1/2/3 divide the optimizer
states / +gradients / +weights by the sharding group. Megatron's distributed optimizer
and FSDP shard over data- and context-parallel ranks together, and expert states over
``dp * cp / ep`` (Megatron-Core ``expert_data_parallel``). FSDP holds the current and
the prefetched layer unsharded (Zhao et al. 2023, "PyTorch FSDP", Sec. 3.2.2).
Activations: :mod:`plait.cost.activations` times the micro-batches in flight
(:mod:`plait.cost.pipeline`).
"""

from __future__ import annotations

from plait.cost import activations as act
from plait.cost.estimate import MemoryBreakdown
from plait.cost.params import stage_layer_counts, stage_params
from plait.cost.pipeline import inflight_micro_batches
from plait.cost.setup import Setup
from plait.hardware.accelerator import GIB

PARAM_BYTES = 2  # bf16/fp16 compute copy of the weights (Micikevicius et al. 2018)


def optimizer_bytes_per_param(setup: Setup) -> float:
    """fp32 master copy (if kept) plus optimizer moments: AdamW two, SGD-momentum one."""
    plan = setup.plan
    moments = 8 if plan.optimizer == "adamw" else 4
    return moments + (4 if plan.master_weights else 0)


def shard_groups(setup: Setup) -> tuple[int, int]:
    """(dense, expert) sharding-group sizes of ZeRO/FSDP (1 when nothing is sharded)."""
    plan = setup.plan
    if plan.sharding == "none":
        return 1, 1
    dense = plan.dp_shard * plan.cp
    return dense, max(1, dense // plan.ep)


def _stage_activation_bytes(setup: Setup, stage: int) -> tuple[float, float]:
    """(activation bytes at the peak, micro-batches in flight) of ``stage``."""
    plan = setup.plan
    n_dense, n_moe = stage_layer_counts(setup, stage)
    full = {False: act.layer_bytes(setup, False), True: act.layer_bytes(setup, True) if n_moe else 0.0}
    if plan.recompute == "selective":
        kept = {moe: act.layer_bytes_selective(setup, moe) if (moe is False or n_moe) else 0.0 for moe in (False, True)}
        per_mb = n_dense * kept[False] + n_moe * kept[True]
        working = 0.0
    elif plan.recompute == "full":
        layers = n_dense + n_moe
        recomputed = layers if plan.recompute_layers < 0 else min(plan.recompute_layers, layers)
        stored_full = layers - recomputed
        moe_full = min(n_moe, stored_full)  # layers kept whole are taken from the end of the stage
        dense_full = stored_full - moe_full
        per_mb = recomputed * act.layer_input_bytes(setup) + dense_full * full[False] + moe_full * full[True]
        working = max(full[False], full[True]) if recomputed else 0.0
    else:
        per_mb = n_dense * full[False] + n_moe * full[True]
        working = 0.0
    inflight = inflight_micro_batches(plan, stage)
    if stage == 0:
        per_mb += act.first_stage_extra_bytes(setup)
    total = inflight * per_mb + working
    if stage == plan.pp - 1:
        total += act.last_stage_extra_bytes(setup)
    return total, inflight


def stage_memory(setup: Setup, stage: int) -> MemoryBreakdown:
    """Peak memory of one GPU of pipeline stage ``stage``."""
    plan, acc = setup.plan, setup.cluster.accelerator
    params = stage_params(setup, stage)
    dense_group, expert_group = shard_groups(setup)
    sharded = params.dense / dense_group + params.expert / expert_group
    weights = PARAM_BYTES * (sharded if plan.sharding == "zero3" else params.total)
    if plan.offload_params:
        weights = 0.0
    grads = setup.grad_bytes * (sharded if plan.sharding in ("zero2", "zero3") else params.total)
    optimizer = 0.0 if plan.offload_optimizer else optimizer_bytes_per_param(setup) * (
        sharded if plan.sharding != "none" else params.total)
    buffers = 0.0
    if plan.sharding == "zero3" and dense_group > 1 or plan.offload_params:
        buffers = params.largest_layer * (2 * PARAM_BYTES + setup.grad_bytes)
    activations, inflight = _stage_activation_bytes(setup, stage)
    eff = acc.efficiency
    return MemoryBreakdown(
        stage=stage,
        weights_bytes=weights,
        gradients_bytes=grads,
        optimizer_bytes=optimizer,
        activations_bytes=activations,
        comm_buffers_bytes=buffers,
        runtime_reserved_bytes=eff.runtime_reserved_gib.value * GIB,
        fragmentation_bytes=eff.allocator_overhead.value * (activations + buffers),
        capacity_bytes=acc.memory_bytes,
        inflight_micro_batches=inflight,
    )


def peak_memory(setup: Setup) -> MemoryBreakdown:
    """The most loaded stage's breakdown (first and last stages bracket the others)."""
    stages = {0, setup.plan.pp - 1}
    return max((stage_memory(setup, s) for s in stages), key=lambda m: m.total_bytes)
