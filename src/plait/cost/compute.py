"""Time of compute kernels from FLOPs and bytes through the hardware efficiency model.

Each kernel is bounded by a roofline (Williams, Waterman & Patterson 2009): the larger
of ``FLOPs / (peak x achievable fraction)`` and ``bytes / (HBM bandwidth x achievable
fraction)``, and never shorter than one kernel launch. A GEMM's achievable fraction is read
from the measured square-GEMM curve of its device at the square GEMM of equal arithmetic
intensity: an ``M x N x K`` GEMM does ``2MNK`` FLOPs on ``2(MK + NK + MN)`` bytes (NVIDIA,
"Matrix Multiplication Background User's Guide", Sec. 2, "Math and Memory Bounds"), so its
intensity is ``1 / (1/M + 1/N + 1/K)`` and the equal square edge is ``3 / (1/M + 1/N + 1/K)``.
A skinny GEMM (one small dimension, as tensor parallelism makes them) reuses each operand
less and runs below a square GEMM of the same work. The achievable fractions are hardware
figures from ``efficiency.toml`` (public microbenchmarks), never fitted to runs.
"""

from __future__ import annotations

from plait.cost.flops import Gemm
from plait.cost.framework import AttentionKernel
from plait.cost.setup import Setup
from plait.hardware.accelerator import Accelerator
from plait.hardware.catalog import kernel_curve


def matmul_flops_per_s(acc: Accelerator, dtype: str, size: float) -> float:
    """Sustained FLOP/s of GEMMs in ``dtype`` whose square-equivalent edge is ``size``."""
    eff = acc.efficiency.matmul_fp8 if dtype == "fp8" else acc.efficiency.matmul_bf16
    return acc.peak_flops(dtype) * eff.at(size)


def memory_bytes_per_s(acc: Accelerator) -> float:
    """Sustained HBM bandwidth of streaming kernels."""
    return acc.memory_bandwidth_bytes_per_s * acc.efficiency.memory.value


def gemm_time_s(gemm: Gemm, acc: Accelerator, dtype: str) -> float:
    """Roofline time of ``gemm.count`` GEMMs; operands in ``dtype``, output in bf16."""
    in_bytes = 1 if dtype == "fp8" else 2
    moved = (in_bytes * (gemm.m * gemm.k + gemm.k * gemm.n) + 2 * gemm.m * gemm.n) * gemm.count
    launch = acc.efficiency.kernel_launch_us.value * 1e-6 * gemm.count
    size = 3.0 / (1.0 / gemm.m + 1.0 / gemm.n + 1.0 / gemm.k)  # square edge of equal arithmetic intensity
    return max(gemm.flops / matmul_flops_per_s(acc, dtype, size), moved / memory_bytes_per_s(acc), launch)


def gemms_fwd_bwd_s(gemms: list[Gemm], setup: Setup) -> tuple[float, float]:
    """Forward and backward time of ``gemms``: backward is the input-gradient GEMM
    (``m x n`` by ``n x k``) plus the weight-gradient GEMM (``k x m`` by ``m x n``)."""
    acc, dtype = setup.cluster.accelerator, setup.gemm_dtype
    fwd = bwd = 0.0
    for g in gemms:
        fwd += gemm_time_s(g, acc, dtype)
        bwd += gemm_time_s(Gemm(g.m, g.k, g.n, g.count), acc, dtype)
        bwd += gemm_time_s(Gemm(g.k, g.n, g.m, g.count), acc, dtype)
    return fwd, bwd


def elementwise_time_s(num_bytes: float, acc: Accelerator) -> float:
    """Time of memory-bound kernels moving ``num_bytes`` through HBM."""
    return num_bytes / memory_bytes_per_s(acc)


def attention_flops_per_s(acc: Accelerator, key_length: float, kernel: AttentionKernel = "flash") -> float:
    """Sustained FLOP/s of fused (flash) attention in bf16, forward and backward together, over ``key_length`` keys;
    the accelerator's curve is FlashAttention-2's, and a ``"flash1"`` kernel runs at the fraction of it that the
    ``flash1_relative`` curve of hardware/data/kernels.toml gives."""
    rate = acc.peak_flops("bf16") * acc.efficiency.attention.at(key_length)
    return rate * kernel_curve("flash1_relative").at(key_length) if kernel == "flash1" else rate
