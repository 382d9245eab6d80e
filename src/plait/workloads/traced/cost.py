"""Step time and memory per GPU of a plan for a traced workload (:mod:`plait.workloads.traced.model`).

The same physics as the transformer path, read from the trace instead of closed forms:

- **Kernels.** Each traced operator on ``b`` examples is a roofline, and one launch on the host stream (eager
  PyTorch) (:mod:`.timing`); a pass takes the longer of its device work and its host's launches
  (:mod:`plait.cost.host`).
- **Pipeline.** Units are cut into ``pp`` contiguous stages minimising the slowest stage's forward and backward
  (:func:`.timing.split_stages`); 1F1B or GPipe time and in-flight micro-batches as :mod:`plait.cost.pipeline`;
  each micro-batch sends the cut unit's output forward and its gradient back.
- **Gradient accumulation.** Each micro-batch after the first adds its gradients into those held
  (:mod:`.accumulation`), device work beside the passes.
- **Data parallelism.** DDP's buckets, ZeRO's collectives and FSDP2's hooks, or the ``dp_sync`` method's cost, as
  :mod:`plait.workloads.traced.dataparallel` times them.
- **Tensor parallelism** of the repeated units' Linear pairs and self-attentions (``tp``, alone or beside data
  parallelism and pipeline stages, the replicas unsharded): their GEMMs, weights, state and some saved activations
  split, two all-reduces per pair or attention and micro-batch (:mod:`plait.workloads.traced.tensor_parallel`).
- **Memory** of the fullest stage as :mod:`plait.workloads.traced.memory`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from plait.cost.dataparallel import optimizer_step_s
from plait.cost.estimate import Estimate, IntervalOf, TimeBreakdown
from plait.cost.host import EagerOptimizer, eager_issue, eager_optimizer_s, exposed_host_s, issue_s
from plait.cost.input_pipeline import (
    Loader,
    host_cores_per_used_gpu,
    input_wait_s,
    loader_core_speed,
    loader_step_s,
)
from plait.cost.links import collective_s
from plait.cost.memory import optimizer_bytes_per_param, param_bytes
from plait.cost.pipeline import pipeline_time_s
from plait.engine.engine import Engine
from plait.errors import ConfigError
from plait.hardware.accelerator import Accelerator
from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns
from plait.plan.convergence import averaging_replicas, convergence
from plait.plan.ops import SCALAR
from plait.plan.plan import FULL_PRECISIONS, Plan
from plait.workloads.traced.accumulation import accumulation_s
from plait.workloads.traced.dataparallel import ddp_bytes, dp_comm_s, fsdp_exposed_s, fsdp_hooks_s
from plait.workloads.traced.flat_reduce import FlatReduce
from plait.workloads.traced.memory import fullest_stage, stage_memory
from plait.workloads.traced.model import TracedWorkload
from plait.workloads.traced.optimizer_passes import OptimizerPasses
from plait.workloads.traced.tensor_fusion import TensorFusion
from plait.workloads.traced.tensor_parallel import check_tp, pair_bytes, params_per_rank, tp_comm_s
from plait.workloads.traced.timing import (
    CONVOLUTIONS,
    gemm_dtype_of,
    pays_layout_transposes,
    split_stages,
    unit_launches,
    units_seconds,
)

FLOP_CONVENTION = ("traced: PyTorch FlopCounterMode formulas for every forward and backward operator (hardware FLOPs: "
                   "flash attention's backward counts its recomputed scores)")


def check_traced_plan(work: TracedWorkload, plan: Plan) -> None:
    """One-line refusals of what a traced workload cannot be planned with (yet)."""
    check_tp(work, plan)
    for name, value in (("cp", plan.cp), ("ep", plan.ep), ("vpp", plan.vpp)):
        if value != 1:
            raise ConfigError(f"{name}={value}: a traced workload ({work.name}) runs data, pipeline and Linear-pair "
                              f"tensor parallelism only ({name} needs the layer structure a closed-form model "
                              f"describes); use {name}=1")
    if plan.recompute == "selective":
        raise ConfigError("recompute='selective' needs an attention core to drop; a traced workload takes "
                          "'none' or 'full'")
    if plan.pp > 1 and plan.schedule not in ("1f1b", "gpipe"):
        raise ConfigError(f"schedule={plan.schedule!r}: a traced workload's pipeline runs 1f1b or gpipe")
    blocks = len(work.units) - 2
    if plan.pp > max(1, blocks):
        raise ConfigError(f"pp={plan.pp} must be at most the {blocks} {work.unit_class} units a pipeline can cut")
    if plan.swap_activations:
        raise ConfigError("swap_activations is not costed for traced workloads yet; use swap_activations = false")
    if plan.offload_params or plan.offload_optimizer:
        raise ConfigError("offloading is not costed for traced workloads yet; use offload_params = "
                          "offload_optimizer = false")
    if plan.global_batch % (plan.micro_batch * plan.dp):
        raise ConfigError(f"global_batch={plan.global_batch} must be a multiple of micro_batch x dp = "
                          f"{plan.micro_batch * plan.dp}")
    if plan.dp_sync.whole_gradients and plan.sharding != "none":
        raise ConfigError(f"dp_sync={plan.dp_sync.name!r} reduces each replica's whole gradient and needs "
                          f"sharding='none' (got sharding={plan.sharding!r})")
    learners = plan.dp_sync.learners
    if plan.dp_sync.whole_learners and (plan.sharding != "none" or plan.pp > 1 or plan.micro_batch % learners):
        raise ConfigError(f"dp_sync={plan.dp_sync.stated!r} trains whole model replicas as learners inside each rank: "
                          f"it needs pp = 1, sharding='none' and learners={learners} dividing "
                          f"micro_batch={plan.micro_batch} (got pp={plan.pp}, sharding={plan.sharding!r})")


@dataclass(frozen=True, kw_only=True)
class TracedRunFacts:
    """How one run of a traced workload is fed, laid out and stepped, beyond its plan and engine: the facts a
    validation row or a command line states. The defaults are a bare run: the input ready on the device, PyTorch's
    NCHW layout, Adam's one fused pass and DDP's buckets."""

    loader: Loader | None = None
    """The data loader feeding each GPU: the step waits for the slower of the device and the input pipeline
    (:mod:`plait.cost.input_pipeline`); ``None``: the input is ready on the device each step (warned)."""
    channels_last: bool = False
    """Convolutions' activations are stored NHWC (PyTorch's ``torch.channels_last``); PyTorch's default is NCHW,
    whose tensor-core convolutions transpose (:func:`plait.workloads.traced.timing.layout_transpose_s`)."""
    eager_optimizer: EagerOptimizer | None = None
    """The host issues the optimizer step tensor by tensor after a synchronization
    (:func:`plait.cost.host.eager_optimizer_s`); ``None``: the optimizer step is device-bound."""
    flat_reduce: FlatReduce | None = None
    """The replicas reduce their gradients in one flat all-reduce after the last backward, not in DDP's buckets
    (:mod:`plait.workloads.traced.flat_reduce`); ``None``: DDP's buckets."""
    fusion: TensorFusion | None = None
    """The replicas reduce their gradients in Horovod's fused batches once per cycle
    (:mod:`plait.workloads.traced.tensor_fusion`); ``None``: DDP's buckets."""
    optimizer_passes: OptimizerPasses | None = None
    """The optimizer step's device time is its kernels' bytes (:mod:`plait.workloads.traced.optimizer_passes`);
    ``None``: Adam's one pass (:func:`plait.cost.dataparallel.optimizer_step_s`)."""


BARE_RUN = TracedRunFacts()
"""A bare run (:class:`TracedRunFacts`' defaults)."""


@dataclass(frozen=True)
class _Cut:
    """What every part of a traced estimate reads: the plan per example and its columns, the GEMMs' dtype, the
    gradients' bytes per value, each unit's (forward, backward) seconds, the stages' units and which units
    recompute."""

    plan: Plan
    cols: PlanColumns
    gemm_dtype: str
    grad_bytes: float
    seconds: list[tuple[float, float]]
    stages: list[list[int]]
    recomputed: list[bool]


def _cut(work: TracedWorkload, cluster: Cluster, plan: Plan, channels_last: bool) -> _Cut:
    """The checked plan per example (one example is the unit of throughput) and its units' times and stages."""
    check_traced_plan(work, plan)
    plan = replace(plan, seq_len=1)
    gemm_dtype = gemm_dtype_of(plan)
    if plan.precision in FULL_PRECISIONS and work.dtype != "float32":
        raise ConfigError(f"precision={plan.precision} stores weights and activations in fp32: trace the model in "
                          f"float32 (it was traced in {work.dtype})")
    grad_bytes = 2.0 if plan.grad_reduce_dtype == "bf16" else 4.0
    seconds = units_seconds(work, cluster.accelerator, plan, gemm_dtype, channels_last)
    stages = split_stages([f + w for f, w in seconds], plan.pp)
    recomputed = [plan.recompute == "full" and 0 < i < len(work.units) - 1 for i in range(len(work.units))]
    return _Cut(plan, PlanColumns.one(plan), gemm_dtype, grad_bytes, seconds, stages, recomputed)


def _stage_pass(work: TracedWorkload, acc: Accelerator, cut: _Cut, launch_s: float,
                group: list[int]) -> tuple[float, float, float, float]:
    """(forward, backward, recomputation, the host's wait) of one micro-batch on a stage: every traced operator
    is one launch of the host stream, joined with the device once per pass (:mod:`plait.cost.host`)."""
    seconds, recomputed = cut.seconds, cut.recomputed
    fwd = sum(seconds[i][0] for i in group)
    bwd = sum(seconds[i][1] for i in group)
    redo = sum(seconds[i][0] for i in group if recomputed[i])
    launches = [unit_launches(work.units[i]) for i in group]
    host_fwd = launch_s * sum(f for f, _ in launches)
    host_bwd = launch_s * (sum(b for _, b in launches) + sum(f for (f, _), i in zip(launches, group) if recomputed[i]))
    queued = acc.asynchronous_launch
    waits = exposed_host_s(fwd, host_fwd, SCALAR, queued) + exposed_host_s(bwd + redo, host_bwd, SCALAR, queued)
    return fwd, bwd, redo, waits


def _p2p_s(work: TracedWorkload, cluster: Cluster, cut: _Cut) -> float:
    """Seconds of a step's pipeline sends: the largest cut's activation, forward and back, per micro-batch, between
    stages ``tp x dp`` ranks apart."""
    plan = cut.plan
    if plan.pp == 1:
        return 0.0
    sent = max(work.units[g[-1]].output_bytes_per_example * plan.micro_batch for g in cut.stages[:-1])
    return 2 * plan.num_micro_batches * float(collective_s(cluster, "p2p", plan.pp, plan.dp * plan.tp, sent))


def _optimizer_s(cluster: Cluster, cut: _Cut, params: dict[str, float], named: list[tuple[str, tuple[int, ...]]],
                 eager: bool, facts: TracedRunFacts) -> float:
    """Seconds of the optimizer step: Adam's one pass, or its kernels' passes, issued eagerly or not
    (:class:`TracedRunFacts`)."""
    seconds = float(optimizer_step_s(cluster, cut.cols, params, cut.grad_bytes))
    if facts.optimizer_passes is not None:
        seconds = facts.optimizer_passes.step_s(cluster, sum(params.values()))
    if facts.eager_optimizer is not None:
        seconds = eager_optimizer_s(facts.eager_optimizer, [shape for _, shape in named], seconds, cluster, eager)
    return seconds


def _time(work: TracedWorkload, cluster: Cluster, cut: _Cut, engine: Engine,
          facts: TracedRunFacts) -> tuple[TimeBreakdown, float]:
    """The step's time by component on the slowest stage, and the data-parallel buffers' extra bytes."""
    plan, cols, acc, stages, grad_bytes = cut.plan, cut.cols, cluster.accelerator, cut.stages, cut.grad_bytes
    m = plan.num_micro_batches
    eager = eager_issue(engine.framework)
    launch_s = issue_s(acc, eager)
    passes = [_stage_pass(work, acc, cut, launch_s, g) for g in stages]
    totals = [f + w + r + h for f, w, r, h in passes]
    slow = max(range(len(stages)), key=lambda s: totals[s])
    mean_bwd = sum(w + r for _, w, r, _ in passes) / len(passes)
    busy, bubble = pipeline_time_s(cols, totals[slow], sum(totals) / len(totals), mean_bwd, mean_bwd / 2)
    group, (fwd, bwd, redo, waits) = stages[slow], passes[slow]
    params = {"dense": params_per_rank(work, group, plan.tp), "expert": 0.0, "norms": 0.0}
    named = [p for i in group for p in work.units[i].params]
    fsdp = m * (fsdp_exposed_s(cluster, plan, work, group, cut.seconds, grad_bytes)
               + fsdp_hooks_s(cluster, plan, work, group, cut.recomputed))
    dp_comm, extra = dp_comm_s(cluster, plan, cols, work, group, cut.seconds, params, named, grad_bytes,
                               bwd + redo, fwd, busy, facts.flat_reduce, facts.fusion)
    held = sum(params.values()) / (plan.dp_shard if plan.sharding in ("zero2", "zero3") else 1)  # gradients kept
    time = TimeBreakdown(compute_s=m * (fwd + bwd) + accumulation_s(held, grad_bytes, m, acc),
                         recompute_s=m * redo, host_s=m * waits,
                         tp_comm_s=m * tp_comm_s(cluster, work, plan, group, cut.recomputed),
                         pp_p2p_s=_p2p_s(work, cluster, cut), pp_bubble_s=float(bubble), fsdp_comm_s=fsdp,
                         dp_comm_s=dp_comm, optimizer_s=_optimizer_s(cluster, cut, params, named, eager, facts))
    return time, extra


def _warnings(work: TracedWorkload, cluster: Cluster, cut: _Cut, facts: TracedRunFacts) -> list[str]:
    """What the estimate assumes for want of a stated fact, and what it does not count."""
    warnings = []
    if facts.loader is None:
        warnings.append("assumed: the input is ready on the device each step (no data loader costed)")
    if pays_layout_transposes(cluster.accelerator, cut.gemm_dtype, facts.channels_last) and any(
            k.name in CONVOLUTIONS for u in work.units for k in u.kernels):
        warnings.append("assumed: activations in PyTorch's default NCHW layout, so tensor-core convolutions pay "
                        "their layout transposes (a channels_last model does not)")
    if cluster.site_gpus is not None and cut.plan.num_gpus > cluster.site_gpus:
        warnings.append("bytes leaving sites are not counted for traced workloads yet")
    return warnings


def estimate_traced(work: TracedWorkload, cluster: Cluster, plan: Plan, engine: Engine, interval: IntervalOf,
                    facts: TracedRunFacts = BARE_RUN) -> Estimate:
    """The estimate of ``plan`` (data, pipeline and tensor parallelism) for the traced ``work`` on ``cluster``, run
    as ``facts`` state, its step-time interval by ``interval`` (module docstring)."""
    cut = _cut(work, cluster, plan, facts.channels_last)
    plan, cols, acc = cut.plan, cut.cols, cluster.accelerator
    time, extra = _time(work, cluster, cut, engine, facts)
    if facts.loader is not None and facts.loader.host_s_per_sample.value:  # each GPU's loader prepares its share
        loading = loader_step_s(facts.loader, plan.global_batch / plan.dp,
                                host_cores_per_used_gpu(cluster, plan.num_gpus),
                                loader_core_speed(facts.loader, cluster).value)
        time = replace(time, input_wait_s=input_wait_s(time.total_s, loading))
    stage = fullest_stage(work, plan, cols, cut.stages)
    memory = stage_memory(work, cluster, plan, cols, cut.stages, stage, cut.grad_bytes, extra)
    flops = work.flops_per_example() * plan.global_batch
    refwd = sum(u.flops(1, False) for u, r in zip(work.units, cut.recomputed) if r) * plan.global_batch
    return Estimate(
        model_name=work.name, cluster_name=cluster.name, engine=engine.spec, plan=plan, memory=memory, time=time,
        interval_of=interval,
        tokens_per_step=plan.global_batch, model_flops_per_step=flops, hardware_flops_per_step=flops + refwd,
        peak_flops_per_gpu=acc.peak_flops(cut.gemm_dtype), price_per_gpu_hour_usd=cluster.price_per_gpu_hour_usd,
        state_bytes=work.total_params() * float(param_bytes(cols) + optimizer_bytes_per_param(cols)),
        storage_bytes_per_s_per_gpu=cluster.storage_bytes_per_s_per_gpu,
        convergence=convergence(plan.dp_sync, averaging_replicas(plan.dp, plan.dp_replicate, plan.sharding)),
        num_params=float(work.total_params()), num_active_params=float(work.total_params()),
        warnings=_warnings(work, cluster, cut, facts), sample_unit="samples", flop_convention=FLOP_CONVENTION,
        power=cluster.power)


def collective_bytes_per_step(work: TracedWorkload, plan: Plan) -> tuple[float, float]:
    """(TP, DP) bytes one rank hands to its collectives per step for an unsharded, unpipelined plan (``pp = 1``,
    ``sharding = "none"``, the all-reduce): its pairs' all-reduces over the micro-batches
    (:func:`plait.workloads.traced.tensor_parallel.pair_bytes`) and DDP's buckets of its gradients
    (:func:`plait.workloads.traced.dataparallel.ddp_bytes`) -- what :mod:`plait.workloads.traced.tp_runtime`
    counts."""
    assert plan.pp == 1 and plan.sharding == "none" and plan.dp_sync.is_allreduce, plan.describe()
    group = list(range(len(work.units)))
    recomputed = [plan.recompute == "full" and 0 < i < len(work.units) - 1 for i in group]
    grad_bytes = 2.0 if plan.grad_reduce_dtype == "bf16" else 4.0
    return (plan.num_micro_batches * sum(pair_bytes(work, plan, group, recomputed)),
            ddp_bytes(work, plan, group, grad_bytes))
