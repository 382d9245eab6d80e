"""Step time and memory per GPU of a plan for a traced workload (:mod:`plait.workloads.traced.model`).

The same physics as the transformer path, read from the trace instead of closed forms:

- **Kernels.** Each traced operator on ``b`` examples is a roofline (Williams, Waterman & Patterson 2009): an
  operator with FLOPs runs at the accelerator's GEMM curve at the square edge of its arithmetic intensity (an
  ``M x N x K`` product moves ``M K + K N + M N`` elements for ``2 M N K`` FLOPs, so the edge of the square GEMM
  of equal intensity is ``3 F / (2 elements)``: :mod:`plait.cost.compute`), the others at the sustained memory
  bandwidth (a batch normalization's two sweeps over its activations each way: :mod:`.normalization`), none
  shorter than a kernel launch. Each operator is also one launch on the host stream (eager
  PyTorch), and a pass takes the longer of its device work and its host's launches (:mod:`plait.cost.host`).
- **Pipeline.** Units are cut into ``pp`` contiguous stages (the stem with the first, the head and loss with the
  last) minimising the slowest stage's forward and backward (the linear-partition dynamic programme); 1F1B or
  GPipe time and in-flight micro-batches as :mod:`plait.cost.pipeline`; each micro-batch sends the cut unit's
  output forward and its gradient back.
- **Gradient accumulation.** Each micro-batch after the first adds its gradients into those held
  (:mod:`.accumulation`), device work beside the passes.
- **Data parallelism.** DDP's buckets, ZeRO's collectives and FSDP2's hooks, or the ``dp_sync`` method's cost, as
  :mod:`plait.workloads.traced.dataparallel` times them.
- **Tensor parallelism** of the repeated units' Linear pairs and self-attentions (``tp``, alone or beside data
  parallelism and pipeline stages, the replicas unsharded): their GEMMs, weights, state and some saved activations
  split, two all-reduces per pair or attention and micro-batch (:mod:`plait.workloads.traced.tensor_parallel`).
- **Memory.** Model states as :mod:`plait.cost.memory` (ZeRO, Rajbhandari et al. 2020); activations are the
  units' saved bytes times the micro-batches in flight; full recomputation keeps each recomputed unit's input and
  one unit's activations while it is recomputed.
"""

from __future__ import annotations

from dataclasses import replace

from plait.cost.compute import matmul_flops_per_s, memory_bytes_per_s
from plait.cost.dataparallel import optimizer_step_s
from plait.cost.estimate import Estimate, IntervalOf, MemoryBreakdown, TimeBreakdown
from plait.cost.host import EagerOptimizer, eager_issue, eager_optimizer_s, exposed_host_s, issue_s
from plait.cost.input_pipeline import Loader, host_cores_per_used_gpu, input_wait_s, loader_step_s
from plait.cost.links import collective_s
from plait.cost.memory import optimizer_bytes_per_param, param_bytes
from plait.cost.pipeline import inflight_micro_batches, pipeline_time_s
from plait.engine.engine import Engine
from plait.errors import ConfigError
from plait.hardware.accelerator import Accelerator
from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns
from plait.plan.convergence import averaging_replicas, convergence
from plait.plan.ops import SCALAR
from plait.plan.plan import FULL_PRECISIONS, Plan
from plait.units import GIB
from plait.workloads.traced.accumulation import accumulation_s
from plait.workloads.traced.dataparallel import ddp_bytes, dp_comm_s, fsdp_exposed_s, fsdp_hooks_s
from plait.workloads.traced.flat_reduce import FlatReduce
from plait.workloads.traced.model import Kernel, TracedWorkload, Unit
from plait.workloads.traced.normalization import kernel_moved_bytes
from plait.workloads.traced.optimizer_passes import OptimizerPasses
from plait.workloads.traced.tensor_fusion import TensorFusion
from plait.workloads.traced.tensor_parallel import check_tp, pair_bytes, params_per_rank, split_unit, tp_comm_s

ELEMENT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
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


CONVOLUTIONS = ("convolution", "convolution_backward")
"""The traced (aten) operators that run as cuDNN convolutions."""


def kernel_s(kernel: Kernel, batch: float, acc: Accelerator, gemm_dtype: str, element_bytes: int,
             nchw_tensor_cores: bool = False) -> float:
    """Roofline seconds of one traced operator on ``batch`` examples (module docstring); with ``nchw_tensor_cores``
    a convolution also transposes its activations (:func:`layout_transpose_s`)."""
    moved, flops = kernel_moved_bytes(kernel, batch), kernel.flops(batch)
    launch = acc.efficiency.kernel_launch_us.value * 1e-6
    memory = moved / memory_bytes_per_s(acc)
    if not flops:
        return max(memory, launch)
    edge = 3.0 * flops / (2.0 * max(moved / element_bytes, 1.0))
    seconds = max(flops / matmul_flops_per_s(acc, gemm_dtype, edge), memory, launch)
    if nchw_tensor_cores and kernel.name in CONVOLUTIONS:
        seconds += layout_transpose_s(moved - kernel.fixed_bytes, acc)
    return seconds


def layout_transpose_s(activation_bytes: float, acc: Accelerator) -> float:
    """Seconds of the layout transposes around a tensor-core convolution on channels-first (NCHW) tensors: tensor
    cores take channels-last (NHWC) data, so cuDNN transposes each activation the convolution reads to NHWC and its
    result back, a read and a write of every activation byte in a separate memory-bound kernel (MosaicML Composer,
    'Channels Last' method card, after NVIDIA's diagram: 'the NCHW tensor must be transposed to NHWC before the
    convolution and transposed back to NCHW after'; TensorFlow's layout assignment for compute capability 7.0,
    tensorflow/compiler/mlir/tensorflow/tests/layout_optimization_layout_assignment_gpu_cc_70.mlir: 'To use Tensor
    Cores for f16 data type, input must be in NHWC data format')."""
    return 2.0 * activation_bytes / memory_bytes_per_s(acc)


def unit_seconds(unit: Unit, batch: float, acc: Accelerator, gemm_dtype: str, element_bytes: int,
                 nchw_tensor_cores: bool = False) -> tuple[float, float]:
    """(forward, backward) seconds of one unit on ``batch`` examples."""
    fwd = bwd = 0.0
    for kernel in unit.kernels:
        seconds = kernel_s(kernel, batch, acc, gemm_dtype, element_bytes, nchw_tensor_cores)
        if kernel.backward:
            bwd += seconds
        else:
            fwd += seconds
    return fwd, bwd


def unit_launches(unit: Unit) -> tuple[int, int]:
    """(forward, backward) operators of one unit, each one kernel the host issues (eager PyTorch: one launch per
    traced operator)."""
    backward = sum(1 for kernel in unit.kernels if kernel.backward)
    return len(unit.kernels) - backward, backward


def split_stages(costs: list[float], stages: int) -> list[list[int]]:
    """Unit indices of ``stages`` contiguous stages minimising the largest stage cost (the first and last units,
    ``pre`` and ``post``, ride with the first and last stages); the linear-partition dynamic programme."""
    inner = list(range(1, len(costs) - 1))
    if stages == 1 or not inner:
        return [list(range(len(costs)))]
    weights = [costs[i] + (costs[0] if i == inner[0] else 0.0) + (costs[-1] if i == inner[-1] else 0.0) for i in inner]
    n = len(weights)
    prefix = [0.0]
    for w in weights:
        prefix.append(prefix[-1] + w)
    best = [[float("inf")] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for k in range(1, stages + 1):
        for end in range(k, n + 1):
            for start in range(k - 1, end):
                value = max(best[k - 1][start], prefix[end] - prefix[start])
                if value < best[k][end]:
                    best[k][end], cut[k][end] = value, start
    bounds, end = [], n
    for k in range(stages, 0, -1):
        bounds.append((cut[k][end], end))
        end = cut[k][end]
    groups = [[inner[i] for i in range(a, b)] for a, b in reversed(bounds)]
    groups[0].insert(0, 0)
    groups[-1].append(len(costs) - 1)
    return groups


def units_seconds(work: TracedWorkload, acc: Accelerator, plan: Plan, gemm_dtype: str,
                  channels_last: bool) -> list[tuple[float, float]]:
    """Forward and backward seconds of each unit on one micro-batch of ``plan`` (:func:`unit_seconds`)."""
    element, transposes = ELEMENT_BYTES.get(work.dtype, 2), _transposes(acc, gemm_dtype, channels_last)
    return [unit_seconds(split_unit(u, plan.tp), plan.micro_batch, acc, gemm_dtype, element, transposes)
            for u in work.units]


def _transposes(acc: Accelerator, gemm_dtype: str, channels_last: bool) -> bool:
    """Whether convolutions pay layout transposes (:func:`layout_transpose_s`)."""
    return not channels_last and gemm_dtype != "fp32" and acc.has_matrix_units


def gemm_dtype_of(plan: Plan) -> str:
    """The dtype ``plan``'s GEMMs run in (bf16 for bf16 and fp16-less plans)."""
    return plan.precision if plan.precision in ("fp8", "fp16", *FULL_PRECISIONS) else "bf16"


def plan_stages(work: TracedWorkload, cluster: Cluster, plan: Plan, channels_last: bool = False) -> list[list[int]]:
    """The units of each of ``plan``'s pipeline stages, as :func:`estimate_traced` cuts them on ``cluster``."""
    seconds = units_seconds(work, cluster.accelerator, plan, gemm_dtype_of(plan), channels_last)
    return split_stages([f + w for f, w in seconds], plan.pp)


def estimate_traced(work: TracedWorkload, cluster: Cluster, plan: Plan, engine: Engine,
                    interval: IntervalOf, loader: Loader | None = None, channels_last: bool = False,
                    eager_optimizer: EagerOptimizer | None = None, flat_reduce: FlatReduce | None = None,
                    fusion: TensorFusion | None = None, optimizer_passes: OptimizerPasses | None = None) -> Estimate:
    """The estimate of ``plan`` (data and pipeline parallelism) for the traced ``work`` on ``cluster``, its step-time
    interval by ``interval``; with a ``loader``, the step waits for the slower of the device and the input pipeline
    (:mod:`plait.cost.input_pipeline`). ``channels_last``: convolutions' activations are stored NHWC (PyTorch's
    ``torch.channels_last``); PyTorch's default is NCHW, whose tensor-core convolutions transpose
    (:func:`layout_transpose_s`). ``eager_optimizer``: the host issues the optimizer step tensor by tensor after a
    synchronization (:func:`plait.cost.host.eager_optimizer_s`). ``flat_reduce``: the replicas reduce their
    gradients in one flat all-reduce after the last backward, not in DDP's buckets (:mod:`.flat_reduce`);
    ``fusion``: in Horovod's fused batches once per cycle (:mod:`.tensor_fusion`). ``optimizer_passes``: the
    optimizer step's device time is its kernels' bytes (:mod:`.optimizer_passes`), not Adam's one pass."""
    check_traced_plan(work, plan)
    plan = replace(plan, seq_len=1)  # one example is the unit of throughput
    cols, acc = PlanColumns.one(plan), cluster.accelerator
    gemm_dtype = gemm_dtype_of(plan)
    if plan.precision in FULL_PRECISIONS and work.dtype != "float32":
        raise ConfigError(f"precision={plan.precision} stores weights and activations in fp32: trace the model in "
                          f"float32 (it was traced in {work.dtype})")
    b, m, dp = plan.micro_batch, plan.num_micro_batches, plan.dp
    grad_bytes = 2.0 if plan.grad_reduce_dtype == "bf16" else 4.0
    seconds = units_seconds(work, acc, plan, gemm_dtype, channels_last)
    stages = split_stages([f + w for f, w in seconds], plan.pp)
    recomputed = [plan.recompute == "full" and 0 < i < len(work.units) - 1 for i in range(len(work.units))]

    eager = eager_issue(engine.framework)
    launch_s = issue_s(acc, eager)

    def stage_pass(group: list[int]) -> tuple[float, float, float, float]:
        """(forward, backward, recomputation, the host's wait) of one micro-batch on a stage: every traced operator
        is one launch of the host stream, joined with the device once per pass (:mod:`plait.cost.host`)."""
        fwd = sum(seconds[i][0] for i in group)
        bwd = sum(seconds[i][1] for i in group)
        redo = sum(seconds[i][0] for i in group if recomputed[i])
        launches = [unit_launches(work.units[i]) for i in group]
        host_fwd = launch_s * sum(f for f, _ in launches)
        host_bwd = launch_s * (sum(b for _, b in launches) + sum(f for (f, _), i in zip(launches, group) if recomputed[i]))
        queued = acc.asynchronous_launch
        waits = exposed_host_s(fwd, host_fwd, SCALAR, queued) + exposed_host_s(bwd + redo, host_bwd, SCALAR, queued)
        return fwd, bwd, redo, waits

    passes = [stage_pass(g) for g in stages]
    totals = [f + w + r + h for f, w, r, h in passes]
    slow = max(range(len(stages)), key=lambda s: totals[s])
    mean = sum(totals) / len(totals)
    mean_bwd = sum(w + r for _, w, r, _ in passes) / len(passes)
    busy, bubble = pipeline_time_s(cols, totals[slow], mean, mean_bwd, mean_bwd / 2)
    group = stages[slow]
    params = {"dense": params_per_rank(work, group, plan.tp), "expert": 0.0, "norms": 0.0}
    named = [p for i in group for p in work.units[i].params]
    fsdp = m * (fsdp_exposed_s(cluster, plan, work, group, seconds, grad_bytes)
               + fsdp_hooks_s(cluster, plan, work, group, recomputed))
    last_backward = passes[slow][1] + passes[slow][2]
    dp_comm, extra = dp_comm_s(cluster, plan, cols, work, group, seconds, params, named, grad_bytes,
                               last_backward, passes[slow][0], busy, flat_reduce, fusion)
    p2p = 0.0
    if plan.pp > 1:  # the largest cut's activation, forward and back, per micro-batch
        sent = max(work.units[g[-1]].output_bytes_per_example * b for g in stages[:-1])
        p2p = 2 * m * float(collective_s(cluster, "p2p", plan.pp, dp * plan.tp, sent))  # stages tp x dp apart
    optimizer_s = float(optimizer_step_s(cluster, cols, params, grad_bytes))
    if optimizer_passes is not None:
        optimizer_s = optimizer_passes.step_s(cluster, sum(params.values()))
    if eager_optimizer is not None:
        optimizer_s = eager_optimizer_s(eager_optimizer, [shape for _, shape in named], optimizer_s, cluster, eager)
    held = sum(params.values()) / (plan.dp_shard if plan.sharding in ("zero2", "zero3") else 1)  # gradients kept
    accumulate = accumulation_s(held, grad_bytes, m, acc)
    time = TimeBreakdown(compute_s=m * (passes[slow][0] + passes[slow][1]) + accumulate,
                         recompute_s=m * passes[slow][2],
                         host_s=m * passes[slow][3],
                         tp_comm_s=m * tp_comm_s(cluster, work, plan, group, recomputed),
                         pp_p2p_s=p2p, pp_bubble_s=float(bubble), fsdp_comm_s=fsdp, dp_comm_s=dp_comm,
                         optimizer_s=optimizer_s)
    if loader is not None:  # each GPU's loader prepares its share of the global batch per step
        loading = loader_step_s(loader, plan.global_batch / dp, host_cores_per_used_gpu(cluster, plan.num_gpus))
        time = replace(time, input_wait_s=input_wait_s(time.total_s, loading))
    memory = _memory(work, cluster, plan, cols, stages, _fullest_stage(work, plan, cols, stages), grad_bytes, extra)
    flops = work.flops_per_example() * plan.global_batch
    refwd = sum(u.flops(1, False) for u, r in zip(work.units, recomputed) if r) * plan.global_batch
    warnings = []
    if loader is None:
        warnings.append("assumed: the input is ready on the device each step (no data loader costed)")
    if _transposes(acc, gemm_dtype, channels_last) and any(k.name in CONVOLUTIONS for u in work.units
                                                           for k in u.kernels):
        warnings.append("assumed: activations in PyTorch's default NCHW layout, so tensor-core convolutions pay "
                        "their layout transposes (a channels_last model does not)")
    if cluster.site_gpus is not None and plan.num_gpus > cluster.site_gpus:
        warnings.append("bytes leaving sites are not counted for traced workloads yet")
    return Estimate(
        model_name=work.name, cluster_name=cluster.name, engine=engine.spec, plan=plan, memory=memory, time=time,
        interval_of=interval,
        tokens_per_step=plan.global_batch, model_flops_per_step=flops, hardware_flops_per_step=flops + refwd,
        peak_flops_per_gpu=acc.peak_flops(gemm_dtype), price_per_gpu_hour_usd=cluster.price_per_gpu_hour_usd,
        state_bytes=work.total_params() * float(param_bytes(cols) + optimizer_bytes_per_param(cols)),
        storage_bytes_per_s_per_gpu=cluster.storage_bytes_per_s_per_gpu,
        convergence=convergence(plan.dp_sync, averaging_replicas(plan.dp, plan.dp_replicate, plan.sharding)),
        num_params=float(work.total_params()), num_active_params=float(work.total_params()),
        warnings=warnings, sample_unit="samples", flop_convention=FLOP_CONVENTION, power=cluster.power)


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


def _fullest_stage(work: TracedWorkload, plan: Plan, cols: PlanColumns, stages: list[list[int]]) -> int:
    """The stage whose activations in flight weigh most (1F1B holds ``pp - s`` micro-batches on stage ``s``)."""
    def held(s: int) -> float:
        saved = sum(work.units[i].saved_bytes(plan.micro_batch, plan.tp) for i in stages[s])
        return float(inflight_micro_batches(cols, s)) * saved
    return max(range(len(stages)), key=held)


def _memory(work: TracedWorkload, cluster: Cluster, plan: Plan, cols: PlanColumns, stages: list[list[int]],
            stage: int, grad_bytes: float, extra: float) -> MemoryBreakdown:
    """Bytes on one GPU of ``stage`` (module docstring)."""
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

