"""Seconds of a traced workload's kernels and units on one micro-batch, and the cut of its units into pipeline
stages (:mod:`plait.workloads.traced.model`), as :func:`plait.workloads.traced.cost.estimate_traced` uses them.

- **Kernels.** Each traced operator on ``b`` examples is a roofline (Williams, Waterman & Patterson 2009): an
  operator with FLOPs runs at the accelerator's GEMM curve at the square edge of its arithmetic intensity (an
  ``M x N x K`` product moves ``M K + K N + M N`` elements for ``2 M N K`` FLOPs, so the edge of the square GEMM
  of equal intensity is ``3 F / (2 elements)``: :mod:`plait.cost.compute`), the others at the sustained memory
  bandwidth (a batch normalization's two sweeps over its activations each way: :mod:`.normalization`), none
  shorter than a kernel launch. Each operator is also one launch on the host stream (eager PyTorch). An fp32 3x3
  stride-1 convolution runs at cuDNN's measured rate of that shape where the accelerator has one (Winograd's
  algorithms do fewer multiplies than the direct FLOPs counted: :func:`conv_fp32_flops_per_s`).
- **Pipeline.** Units are cut into ``pp`` contiguous stages (the stem with the first, the head and loss with the
  last) minimising the slowest stage's forward and backward (the linear-partition dynamic programme).
"""

from __future__ import annotations

from plait.cost.compute import fp32_flops_per_s, matmul_flops_per_s, memory_bytes_per_s
from plait.hardware.accelerator import Accelerator
from plait.hardware.cluster import Cluster
from plait.plan.plan import FULL_PRECISIONS, Plan
from plait.workloads.traced.model import Kernel, TracedWorkload, Unit
from plait.workloads.traced.normalization import kernel_moved_bytes
from plait.workloads.traced.tensor_parallel import split_unit
from plait.workloads.traced.winograd import WINOGRAD_F4X4_REDUCTION

ELEMENT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
"""Bytes of one element of each dtype a workload is traced in."""

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
    rate = conv_fp32_flops_per_s(kernel, acc, gemm_dtype, edge) or matmul_flops_per_s(acc, gemm_dtype, edge)
    seconds = max(flops / rate, memory, launch)
    if nchw_tensor_cores and kernel.name in CONVOLUTIONS:
        seconds += layout_transpose_s(moved - kernel.fixed_bytes, acc)
    return seconds


def conv_fp32_flops_per_s(kernel: Kernel, acc: Accelerator, gemm_dtype: str, edge: float) -> float | None:
    """FLOP/s of an fp32 3x3 stride-1 convolution (or its backward) at cuDNN's measured rate where the accelerator
    has one (:attr:`~plait.hardware.accelerator.Efficiency.conv3x3_fp32`, in Winograd F(4x4, 3x3) multiplies):
    fp32 runs no tensor cores, so cuDNN picks among implicit GEMM, FFT and Winograd by speed, and for this shape
    Winograd does fewer multiplies than the direct FLOPs counted; ``None``: the GEMM rate applies (other
    convolutions run as implicit GEMMs; 16-bit and TF32 ones run implicit GEMMs on tensor cores)."""
    curve = acc.efficiency.conv3x3_fp32
    if gemm_dtype != "fp32" or not kernel.winograd or kernel.name not in CONVOLUTIONS or curve is None:
        return None
    return fp32_flops_per_s(acc) * WINOGRAD_F4X4_REDUCTION * curve.at(edge)


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
    element, transposes = ELEMENT_BYTES.get(work.dtype, 2), pays_layout_transposes(acc, gemm_dtype, channels_last)
    return [unit_seconds(split_unit(u, plan.tp), plan.micro_batch, acc, gemm_dtype, element, transposes)
            for u in work.units]


def pays_layout_transposes(acc: Accelerator, gemm_dtype: str, channels_last: bool) -> bool:
    """Whether convolutions pay layout transposes (:func:`layout_transpose_s`)."""
    return not channels_last and gemm_dtype != "fp32" and acc.has_matrix_units


def gemm_dtype_of(plan: Plan) -> str:
    """The dtype ``plan``'s GEMMs run in (bf16 for bf16 and fp16-less plans)."""
    return plan.precision if plan.precision in ("fp8", "fp16", *FULL_PRECISIONS) else "bf16"


def plan_stages(work: TracedWorkload, cluster: Cluster, plan: Plan, channels_last: bool = False) -> list[list[int]]:
    """The units of each of ``plan``'s pipeline stages, as :func:`estimate_traced` cuts them on ``cluster``."""
    seconds = units_seconds(work, cluster.accelerator, plan, gemm_dtype_of(plan), channels_last)
    return split_stages([f + w for f, w in seconds], plan.pp)
