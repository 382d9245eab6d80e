"""Once-per-step data-parallel traffic and the optimizer step.

- No sharding: a gradient all-reduce over the ``dp * cp`` ranks holding one model shard
  (PyTorch DDP, Li et al. 2020, Sec. 3.2; Megatron reduces over data and context ranks).
- ZeRO-1/2 (Megatron distributed optimizer): reduce-scatter of gradients, then an
  all-gather of updated bf16 weights (Rajbhandari et al. 2020, Sec. 5.1-5.2).
- ZeRO-3/FSDP: gradients are reduce-scattered per micro-batch (costed per layer in
  :mod:`plait.cost.stage`); with HSDP the replicas all-reduce their shards once.
- Overlap: with gradient accumulation only the last micro-batch's backward can hide the
  reduction (DDP ``no_sync``, Li et al. 2020, Sec. 3.2.4); the weight all-gather hides
  behind the next step's first forward (Megatron ``--overlap-param-gather``).
- Optimizer: a memory-bound pass that reads the gradient and reads and writes master
  weights and moments, then writes the bf16 copy; offloaded, gradients and weights
  cross PCIe instead and the CPU step overlaps the next step (ZeRO-Offload, Ren et al.
  2021, Sec. 4.2 "delayed parameter update").
"""

from __future__ import annotations

from plait.cost import collectives as coll
from plait.cost.compute import memory_bytes_per_s
from plait.cost.memory import PARAM_BYTES, optimizer_bytes_per_param, shard_groups
from plait.cost.params import StageParams
from plait.cost.setup import Setup


def gradient_sync_s(setup: Setup, params: StageParams) -> tuple[float, float]:
    """(gradient reduction, weight all-gather) seconds per step, before overlap."""
    plan = setup.plan
    g = setup.grad_bytes
    replicas = plan.dp * plan.cp
    if replicas == 1:
        return 0.0, 0.0
    dense_group, expert_group = shard_groups(setup)
    if plan.sharding == "none":
        dense = coll.group_link(setup.cluster, replicas, plan.tp)
        expert = coll.group_link(setup.cluster, max(1, replicas // plan.ep), plan.tp * plan.ep)
        return coll.all_reduce_s(g * params.dense, dense) + coll.all_reduce_s(g * params.expert, expert), 0.0
    shard = coll.group_link(setup.cluster, dense_group, plan.tp)
    replicate = coll.group_link(setup.cluster, plan.dp_replicate, plan.tp * dense_group)
    sharded = params.dense / dense_group + params.expert / expert_group
    across_replicas = coll.all_reduce_s(g * sharded, replicate)
    if plan.sharding == "zero3":
        return across_replicas, 0.0
    reduce = coll.reduce_scatter_s(g * params.total, shard) + across_replicas
    gather = coll.all_gather_s(PARAM_BYTES * params.total, shard)
    return reduce, gather


def exposed_sync_s(setup: Setup, params: StageParams, last_backward_s: float, first_forward_s: float) -> float:
    """Data-parallel seconds on the critical path after overlap."""
    reduce, gather = gradient_sync_s(setup, params)
    if not setup.plan.overlap_grad_reduce:
        return reduce + gather
    return max(0.0, reduce - last_backward_s) + max(0.0, gather - first_forward_s)


def optimizer_step_s(setup: Setup, params: StageParams) -> float:
    """Seconds of the optimizer step on one rank."""
    plan, acc = setup.plan, setup.cluster.accelerator
    dense_group, expert_group = shard_groups(setup)
    local = params.dense / dense_group + params.expert / expert_group if plan.sharding != "none" else params.total
    if plan.offload_optimizer:
        return local * (setup.grad_bytes + PARAM_BYTES) / (acc.pcie_bandwidth_gb_per_s * 1e9)
    moved = local * (setup.grad_bytes + 2 * optimizer_bytes_per_param(setup) + PARAM_BYTES)
    return moved / memory_bytes_per_s(acc)
