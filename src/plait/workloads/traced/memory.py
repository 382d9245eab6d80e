"""Bytes on one GPU of a traced workload's pipeline stage (:func:`plait.workloads.traced.cost.estimate_traced`).

Model states as :mod:`plait.cost.memory` (ZeRO, Rajbhandari et al. 2020); activations are the units' saved bytes
times the micro-batches in flight (:func:`plait.cost.pipeline.inflight_micro_batches`); full recomputation keeps
each recomputed unit's input and one unit's activations while it is recomputed; ZeRO-3 gathers the largest unit's
weights (and reduces its gradients) in buffers beside the shards.
"""

from __future__ import annotations

from plait.cost.estimate import MemoryBreakdown
from plait.cost.memory import optimizer_bytes_per_param, param_bytes
from plait.cost.pipeline import inflight_micro_batches
from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns
from plait.plan.plan import Plan
from plait.units import GIB
from plait.workloads.traced.model import TracedWorkload
from plait.workloads.traced.tensor_parallel import params_per_rank


def fullest_stage(work: TracedWorkload, plan: Plan, cols: PlanColumns, stages: list[list[int]]) -> int:
    """The stage whose activations in flight weigh most (1F1B holds ``pp - s`` micro-batches on stage ``s``)."""
    def held(s: int) -> float:
        saved = sum(work.units[i].saved_bytes(plan.micro_batch, plan.tp) for i in stages[s])
        return float(inflight_micro_batches(cols, s)) * saved
    return max(range(len(stages)), key=held)


def stage_memory(work: TracedWorkload, cluster: Cluster, plan: Plan, cols: PlanColumns, stages: list[list[int]],
            stage: int, grad_bytes: float, extra: float) -> MemoryBreakdown:
    """Bytes on one GPU of ``stage``, its data-parallel buffers ``extra`` bytes beyond ZeRO-3's (module docstring)."""
    acc, group = cluster.accelerator, stages[stage]
    count = params_per_rank(work, group, plan.tp)
    shard = plan.dp_shard if plan.sharding != "none" else 1
    weights = float(param_bytes(cols)) * (count / shard if plan.sharding == "zero3" else count)
    grads = grad_bytes * (count / shard if plan.sharding in ("zero2", "zero3") else count)
    optimizer = float(optimizer_bytes_per_param(cols)) * (count / shard)
    b, last = plan.micro_batch, len(work.units) - 1
    full = plan.recompute == "full"
    kept = 0.0
    for i in group:
        unit = work.units[i]
        if full and 0 < i < last:  # its input (the previous unit's output) stays
            kept += work.units[i - 1].output_bytes_per_example * b
        else:
            kept += unit.saved_bytes(b, plan.tp)
    working = max((work.units[i].saved_bytes(b, plan.tp) for i in group if full and 0 < i < last), default=0.0)
    inflight = float(inflight_micro_batches(cols, stage))
    activations = inflight * kept + working
    largest = max(work.units[i].num_params for i in group)
    buffers = largest * (2 * float(param_bytes(cols)) + grad_bytes) if plan.sharding == "zero3" and shard > 1 else 0.0
    buffers += extra
    eff = acc.efficiency
    return MemoryBreakdown(
        stage=stage, weights_bytes=weights, gradients_bytes=grads, optimizer_bytes=optimizer,
        activations_bytes=activations, comm_buffers_bytes=buffers,
        runtime_reserved_bytes=eff.runtime_reserved_gib.value * GIB,
        fragmentation_bytes=eff.allocator_overhead.value * (activations + buffers),
        capacity_bytes=acc.memory_bytes, inflight_micro_batches=inflight)

