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
from plait.cost.setup import Setup
from plait.engine.facts import AttentionKernel
from plait.hardware.accelerator import Accelerator
from plait.hardware.catalog import kernel_curve


def matmul_flops_per_s(acc: Accelerator, dtype: str, size: float) -> float:
    """Sustained FLOP/s of GEMMs in ``dtype`` whose square-equivalent edge is ``size`` (tf32 at the bf16 curve's
    fraction of the TF32 peak: assumed, no public TF32 GEMM sweep of the packaged GPUs is kept; fp32 as
    :class:`_Roofline` reads it: on a GPU without matrix units the 16-bit curve is the fp32 cores' own, so it scales
    the fp32 peak)."""
    if dtype == "fp32":
        roofline = roofline_of(acc, "fp32")
        rate = roofline.peak_flops * roofline.curve.at(size)
        return rate if roofline.cap is None else min(rate, roofline.cap)
    eff = acc.efficiency.matmul_fp8 if dtype == "fp8" else acc.efficiency.matmul_bf16
    return acc.peak_flops(dtype) * eff.at(size)


def memory_bytes_per_s(acc: Accelerator) -> float:
    """Sustained HBM bandwidth of streaming kernels."""
    return acc.memory_bandwidth_bytes_per_s * acc.efficiency.memory.value


def fp32_flops_per_s(acc: Accelerator) -> float:
    """Peak fp32 FLOP/s (bf16's, then fp16's, where the datasheet gives none): the optimistic rate of the small
    fp32 GEMMs that synchronization methods add (PowerSGD's, sufficient factors' rebuild)."""
    peaks = acc.peak_tflops
    return (peaks.get("fp32") or peaks.get("bf16") or peaks["fp16"]) * 1e12


def mfu_peak_flops(acc: Accelerator, precision: str) -> float:
    """The peak MFU and HFU divide by: the dense peak of the dtype the plan's GEMMs run in (fp8 plans against the
    fp8 peak, as llm-foundry reports FP8 runs; fp32 plans against the non-tensor fp32 peak; tf32 plans against the
    TF32 tensor-core peak; bf16 and fp16 against the 16-bit peak)."""
    if precision == "fp32":
        return fp32_flops_per_s(acc)
    return acc.peak_flops(precision if precision in ("fp8", "tf32") else "bf16")


def gemm_time_s(gemm: Gemm, acc: Accelerator, dtype: str) -> float:
    """Roofline time of ``gemm.count`` GEMMs; operands in ``dtype``, output in bf16 (fp32 for fp32 GEMMs)."""
    return roofline_of(acc, dtype).time_s(gemm.m, gemm.n, gemm.k, gemm.count)


def roofline_of(acc: Accelerator, dtype: str, weight_gradient: bool = False) -> _Roofline:
    """The roofline of ``dtype`` GEMMs on ``acc`` (:class:`_Roofline`), built once per accelerator and kept on it
    (:attr:`~plait.hardware.accelerator.Accelerator.roofline_cache`): it reads the device's figures alone."""
    key = (dtype, weight_gradient)
    found = acc.roofline_cache.get(key)
    if found is None:
        found = acc.roofline_cache[key] = _Roofline(acc, dtype, weight_gradient)
    return found  # type: ignore[no-any-return]


class _Roofline:
    """:func:`gemm_time_s` with the device figures read once, for the many GEMMs of one layer."""

    def __init__(self, acc: Accelerator, dtype: str, weight_gradient: bool = False) -> None:
        self.in_bytes = {"fp8": 1, "fp32": 4, "tf32": 4}.get(dtype, 2)
        self.out_bytes = 4 if dtype in ("fp32", "tf32") else 2
        self.launch_s = acc.efficiency.kernel_launch_us.value * 1e-6
        self.memory_bytes_per_s = memory_bytes_per_s(acc)
        eff = acc.efficiency
        self.cap: float | None = None
        if dtype == "fp32":  # no transposed-layout curve in fp32: the square one serves both
            self.peak_flops, self.curve = fp32_flops_per_s(acc), eff.matmul_fp32 or eff.matmul_bf16
            if eff.matmul_fp32 is None and acc.has_matrix_units:  # bf16's curve bounds the rate, not its shape
                self.cap, self.peak_flops = self.peak_flops, acc.peak_flops("bf16")
            return
        self.peak_flops = acc.peak_flops(dtype)
        wgrad = eff.matmul_bf16_wgrad if weight_gradient and dtype not in ("fp8", "tf32") else None
        self.curve = wgrad or (eff.matmul_fp8 if dtype == "fp8" else eff.matmul_bf16)

    def time_s(self, m: float, n: float, k: float, count: int = 1) -> float:
        """Seconds of ``count`` ``m x k`` by ``k x n`` products. Without a measured fp32 curve an fp32 product runs
        at the fp32 peak or at the rate the bf16 product of its shape reaches, whichever is lower (assumed: a shape
        that keeps bf16 tensor cores from their peak, by launch, tail or memory, holds fp32 to no better); on a GPU
        without matrix units (:attr:`~plait.hardware.accelerator.Accelerator.has_matrix_units`) 16-bit and fp32
        GEMMs share the same cores and kernels' tiling, so the 16-bit curve's fraction applies to the fp32 peak."""
        moved = (self.in_bytes * (m * k + k * n) + self.out_bytes * m * n) * count
        size = 3.0 / (1.0 / m + 1.0 / n + 1.0 / k)  # square edge of equal arithmetic intensity
        flops = 2.0 * m * n * k * count
        rate = self.peak_flops * self.curve.at(size)
        rate = rate if self.cap is None else min(rate, self.cap)
        # max(compute, memory, launch) written out: the builtin parses its arguments and iterates them, ~800 machine
        # instructions a call (valgrind), and a cold estimate costs ~15 GEMMs; the first of equals kept, as max keeps
        longest, moving, launching = flops / rate, moved / self.memory_bytes_per_s, self.launch_s * count
        if moving > longest:
            longest = moving
        return launching if launching > longest else longest


def fp32_gemm_s(acc: Accelerator) -> _Roofline:
    """The roofline of fp32 GEMMs on ``acc`` (:meth:`_Roofline.time_s` gives a product's seconds)."""
    return roofline_of(acc, "fp32")


def gemms_fwd_bwd_s(gemms: list[Gemm], setup: Setup, start: tuple[float, float] = (0.0, 0.0)) -> tuple[float, float]:
    """Forward and backward time of ``gemms``: backward is the input-gradient GEMM
    (``m x n`` by ``n x k``) plus the weight-gradient GEMM (``k x m`` by ``m x n``, at the accelerator's
    weight-gradient curve where it has one). ``start``: the sums of GEMMs timed before these, which the sums go on
    from (the same additions, in the same order, as timing all the GEMMs at once)."""
    acc = setup.cluster.accelerator
    roofline, wgrad = roofline_of(acc, setup.gemm_dtype), roofline_of(acc, setup.gemm_dtype, weight_gradient=True)
    fwd, bwd = start
    for g in gemms:
        fwd += roofline.time_s(g.m, g.n, g.k, g.count)
        bwd += roofline.time_s(g.m, g.k, g.n, g.count)
        bwd += wgrad.time_s(g.k, g.n, g.m, g.count)
    return fwd, bwd


def gemms_fwd_s(gemms: list[Gemm], setup: Setup) -> float:
    """The forward time of ``gemms`` alone (the first of :func:`gemms_fwd_bwd_s`, summed in the same order)."""
    roofline, fwd = roofline_of(setup.cluster.accelerator, setup.gemm_dtype), 0.0
    for g in gemms:
        fwd += roofline.time_s(g.m, g.n, g.k, g.count)
    return fwd


def elementwise_time_s(num_bytes: float, acc: Accelerator) -> float:
    """Time of memory-bound kernels moving ``num_bytes`` through HBM."""
    return num_bytes / memory_bytes_per_s(acc)


def attention_flops_per_s(acc: Accelerator, key_length: float, kernel: AttentionKernel = "flash",
                          dtype: str = "bf16") -> float:
    """Sustained FLOP/s of fused (flash) attention in bf16, forward and backward together, over ``key_length`` keys;
    the accelerator's curve is FlashAttention-2's, and a ``"flash1"`` kernel runs at the fraction of it that the
    ``flash1_relative`` curve of hardware/data/kernels.toml gives. For fp32 and tf32 runs (FlashAttention takes
    16-bit inputs only; PyTorch's SDPA falls back to its memory-efficient or math kernel) the rate is scaled by
    the ratio of that dtype's GEMM peak to bf16's (assumed: the same fraction of a lower peak)."""
    rate = acc.peak_flops("bf16") * acc.efficiency.attention.at(key_length)
    if dtype in ("fp32", "tf32"):
        rate *= (fp32_flops_per_s(acc) if dtype == "fp32" else acc.peak_flops("tf32")) / acc.peak_flops("bf16")
    return rate * kernel_curve("flash1_relative").at(key_length) if kernel == "flash1" else rate
