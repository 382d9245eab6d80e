"""A row of a batch evaluation as an Estimate (the single-plan path is :mod:`plait.predict.estimate`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from plait.cost.batch import TIME_ITEMS, BatchResult
from plait.cost.compute import mfu_peak_flops
from plait.cost.egress import egress_bytes_per_step
from plait.cost.estimate import Estimate, IntervalOf, MemoryBreakdown, TimeBreakdown
from plait.cost.memory import MEMORY_ITEMS, optimizer_bytes_per_param, param_bytes
from plait.engine.facts import DEFAULT
from plait.hardware.cluster import Cluster
from plait.plan import rules
from plait.plan.columns import PlanColumns
from plait.plan.convergence import averaging_replicas, convergence
from plait.workload.model import ModelSpec

_MEMORY_FIELDS = tuple((k, f"{k}_bytes") for k in MEMORY_ITEMS)
"""(batch column, :class:`MemoryBreakdown` field) of each memory component."""
_TIME_FIELDS = tuple((k, f"{k}_s") for k in TIME_ITEMS)
"""(batch column, :class:`TimeBreakdown` field) of each time component."""


def estimate_from_batch(model: ModelSpec, cluster: Cluster, result: BatchResult, row: int, engine: str,
                        interval: IntervalOf, *, retime: Callable[[TimeBreakdown], TimeBreakdown] | None = None,
                        notes: Sequence[str] = ()) -> Estimate:
    """Row ``row`` of a :class:`~plait.cost.batch.BatchResult` as an Estimate of ``engine`` (its spec), its step-time
    interval by ``interval``; ``retime``: what the caller does to the row's time breakdown (the predict layer's
    simulated pipeline), ``notes``: warnings after the plan's own (the Estimate is built once, with both)."""
    plan, mem, times = result.cols.plan(row), result.memory, result.time
    single = result.cols.single is not None  # a single plan's results are its numbers; a batch's, columns
    at = (lambda value: value) if single else (lambda value: value[row])
    memory = MemoryBreakdown(
        stage=int(at(result.memory_stage)),
        capacity_bytes=cluster.accelerator.memory_bytes,
        inflight_micro_batches=float(at(mem["inflight"])),
        host_activations_bytes=float(at(mem["host_activations"])), host_capacity_bytes=cluster.host_memory_bytes_per_gpu,
        **({name: float(mem[k]) for k, name in _MEMORY_FIELDS} if single
           else {name: float(mem[k][row]) for k, name in _MEMORY_FIELDS}),
    )
    time = TimeBreakdown(**({name: float(times[k]) for k, name in _TIME_FIELDS} if single
                            else {name: float(times[k][row]) for k, name in _TIME_FIELDS}))
    if retime is not None:
        time = retime(time)
    tokens = plan.global_batch * plan.seq_len
    model_flops = float(at(result.model_flops_per_token)) * tokens
    num_params = model.total_params()
    return Estimate(
        model_name=model.name, cluster_name=cluster.name, engine=engine, plan=plan, memory=memory, time=time,
        interval_of=interval,
        tokens_per_step=tokens, model_flops_per_step=model_flops,
        hardware_flops_per_step=model_flops * float(at(result.recompute_factor)),
        peak_flops_per_gpu=mfu_peak_flops(cluster.accelerator, plan.precision),
        price_per_gpu_hour_usd=cluster.price_per_gpu_hour_usd,
        state_bytes=num_params * float(param_bytes(one := result.cols if result.cols.single is not None
                                                             else PlanColumns.one(plan))
                                                 + optimizer_bytes_per_param(one)),
        storage_bytes_per_s_per_gpu=cluster.storage_bytes_per_s_per_gpu,
        # counted under the default engine facts, as plait always has: with the engine's own (the batch's) a
        # pipeline of plait's runtime, whose activations cross stages in fp32, would count twice the bytes
        egress_bytes_per_step=egress_bytes_per_step(model, cluster, plan, DEFAULT),
        egress_usd_per_gb=wide.egress_usd_per_gb if (wide := cluster.wide_area_tier) else 0.0,
        convergence=convergence(plan.dp_sync, averaging_replicas(plan.dp, plan.dp_replicate, plan.sharding)),
        num_params=float(num_params), num_active_params=float(model.active_params()),
        warnings=[*rules.warnings(plan, model, cluster), *notes], moe_model=model.moe is not None, power=cluster.power,
    )
