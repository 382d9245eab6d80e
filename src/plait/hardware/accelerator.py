"""Accelerators: datasheet peaks plus achievable-efficiency figures, each with provenance.

Two kinds of number live here and are kept apart on purpose:
- datasheet facts (``accelerators.toml``): capacity, bandwidths, dense peak FLOP/s per dtype;
- achievable fractions of those peaks (``efficiency.toml``), from public microbenchmarks
  (GEMM, FlashAttention, STREAM-like copies) or from ``plait calibrate`` on real hardware.
Neither is ever fitted to a training run.
"""

# Annotations are evaluated here, not kept as strings (no `from __future__ import annotations`): dataclasses and
# plait.schema would otherwise parse and compile each field's type string when a process starts
# (tests/test_lazy_imports.py).

from dataclasses import dataclass, field
from typing import Any, Literal

from plait.errors import ConfigError
from plait.hardware.eager_dispatch import EAGER_DISPATCH_US
from plait.hardware.figure import Curve, Figure

Dtype = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "fp4"]

from plait.units import GB, GIB

HIDDEN_HOST = ("assumed 0: on a GPU the host issues a layer's kernels ahead of the device, so eager dispatch and "
               "wrapper overheads (FSDP2 hooks, DTensor dispatch) hide behind device work except for tiny layers; a "
               "CPU runs them in line, and plait calibrate measures them there (plait/run/overheads.py)")

ASYNCHRONOUS_LAUNCH = ("PyTorch docs, CUDA semantics, 'Asynchronous execution' (https://pytorch.org/docs/stable/notes/"
                       "cuda.html#asynchronous-execution): 'GPU operations are asynchronous', enqueued to the device and "
                       "run later, so the host runs ahead of the device until a synchronization")

NO_LATENCY = ("not stated: no published pointer-chase latency of this GPU was found; the latency-bound kernels that read "
              "it (plait.workloads.gnn.batch_norm) are costed by their bytes alone")

GPU_SAMPLER = ("not measured: a GPU samples neighbours as DGL's and GNNLab's GPU samplers do, costed by the 32-byte "
               "sectors each draw reads (plait.workloads.gnn.cost); plait calibrate measures plait's CPU sampler on a "
               "CPU")


def with_eager_dispatch(efficiency: dict[str, Any]) -> dict[str, Any]:
    """A packaged ``efficiency`` table (efficiency.toml, whose ``host_launch_us`` is the launch call alone) with the
    framework's dispatch per eager op: as stated, or the measured
    :data:`plait.hardware.eager_dispatch.EAGER_DISPATCH_US` (eager ops run PyTorch's dispatcher before the call)."""
    if "eager_dispatch_us" in efficiency or "host_launch_us" not in efficiency:
        return efficiency
    return {**efficiency, "eager_dispatch_us": {"value": EAGER_DISPATCH_US.value, "source": EAGER_DISPATCH_US.source}}


@dataclass(frozen=True, kw_only=True)
class Efficiency:
    """Achievable fractions of the datasheet peaks and fixed runtime overheads."""

    matmul_bf16: Curve
    """Fraction of bf16/fp16 dense peak a GEMM sustains, by the edge of a square GEMM (a GEMM is read at the square of equal arithmetic intensity, plait.cost.compute)."""
    matmul_fp8: Curve
    """Fraction of fp8 dense peak an fp8 GEMM sustains, by size (ignored where there is no fp8)."""
    matmul_bf16_wgrad: Curve | None = None
    """Fraction of bf16/fp16 dense peak a weight-gradient GEMM sustains (``X^T dY``: its first operand transposed,
    the reduction over tokens), by square edge; ``None``: :attr:`matmul_bf16`'s (assumed for the packaged GPUs:
    cuBLAS picks a kernel per layout and no public figure of a slower transposed layout on them was found).
    ``plait calibrate`` measures it: on a Sapphire Rapids CPU's AMX a square TN product ran at 0.80 TFLOP/s against
    1.32 for NN at 1024 (one thread, bf16)."""
    matmul_fp32: Curve | None = None
    """Fraction of the fp32 peak an fp32 GEMM sustains, by square edge (GNN layers train in fp32); ``None``:
    :attr:`matmul_bf16`'s shape at the fp32 peak (assumed for the packaged GPUs without one: V100 and T4 have
    DeepBench's SGEMM tables, no public fp32 GEMM curve of the others was found). ``plait calibrate`` measures it."""
    conv3x3_fp32: Curve | None = None
    """Rate of cuDNN's fp32 3x3 stride-1 convolutions (Winograd where cuDNN finds it faster), each pass apart (the
    backward's data and filter gradients as ATen's one ``convolution_backward``), by the square edge of equal
    arithmetic intensity (:func:`plait.workloads.traced.timing.kernel_s`), in direct-convolution FLOPs over
    :data:`plait.workloads.traced.winograd.WINOGRAD_F4X4_REDUCTION` times the fp32 peak: the fraction of the peak
    the multiplies of F(4x4, 3x3) would run at (in direct FLOPs cuDNN's best exceeds the peak); ``None``: the fp32
    GEMM rate at that edge, as every other fp32 convolution."""
    attention: Curve
    """Fraction of bf16 peak a fused (flash) attention kernel sustains, forward and backward together,
    by the key length each query attends over (longer rows amortise the per-block overheads)."""
    memory: Figure
    """Fraction of HBM bandwidth a streaming elementwise kernel sustains."""
    kernel_launch_us: Figure
    """Minimum time of one GPU kernel, microseconds (launch + tail)."""
    host_launch_us: Figure = field(default_factory=lambda: Figure(value=0.0, source=HIDDEN_HOST))
    """Host (CPU) time to issue one kernel from a PyTorch program, microseconds: what a layer whose host cannot run
    ahead of the device (:attr:`plait.engine.facts.EngineFacts.moe_host_sync`) waits for per kernel."""
    eager_dispatch_us: Figure = field(default_factory=lambda: Figure(value=0.0, source=HIDDEN_HOST))
    """Host (CPU) time an eager PyTorch op spends in the framework before its launch call, microseconds: paid per
    kernel by the engines that run eager ops. The packaged accelerators, whose ``host_launch_us`` is the launch call
    alone, take the measured figure of :mod:`plait.hardware.eager_dispatch` (:func:`with_eager_dispatch`); a
    description that does not state it has 0: its ``host_launch_us`` is read as the whole per-op host time, as
    ``plait calibrate`` times it (which also writes this 0 with its reason)."""
    host_sync_us: Figure = field(default_factory=lambda: Figure(value=0.0, source=HIDDEN_HOST))
    """Round trip of a host that waits on the device (a device-to-host copy and ``synchronize``), microseconds: what
    the device idles at each synchronization before the host issues its next kernel (:mod:`plait.cost.host`)."""
    comm_overlap: Figure
    """Share of a collective's overlap with compute that stays hidden (1: free; 0: serialised); the rest is
    the compute slowdown that SM and HBM contention cause (:mod:`plait.cost.overlap`)."""
    runtime_reserved_gib: Figure
    """Device memory taken before the model: CUDA context, library workspaces, NCCL buffers."""
    allocator_overhead: Figure
    """Fraction of allocated bytes lost to caching-allocator fragmentation."""
    host_layer_fwd_us: Figure = field(default_factory=lambda: Figure(value=0.0, source=HIDDEN_HOST))
    """Host time of one plain layer's forward beyond its modelled kernels: eager per-op dispatch, microseconds."""
    host_layer_bwd_us: Figure = field(default_factory=lambda: Figure(value=0.0, source=HIDDEN_HOST))
    """The same for one layer's backward (autograd engine and per-op dispatch)."""
    sampling_ns_per_slot: Figure = field(default_factory=lambda: Figure(value=0.0, source=GPU_SAMPLER))
    """Nanoseconds plait's CPU neighbour sampler spends per neighbour slot it scans (:mod:`plait.run.sampler`);
    0: the device samples as a GPU does, costed by the sectors it reads (:mod:`plait.workloads.gnn.cost`)."""
    dram_latency_ns: Figure = field(default_factory=lambda: Figure(value=0.0, source=NO_LATENCY))
    """Time of one dependent global-memory read that misses the L2 cache (a pointer chase over a footprint far larger
    than the L2), nanoseconds; 0: not stated (:mod:`plait.workloads.gnn.batch_norm` reads it)."""
    matrix_sampling_ns_per_slot: Figure = field(default_factory=lambda: Figure(value=0.0, source=GPU_SAMPLER))
    """The same for plait's matrix-based bulk sampler (:mod:`plait.run.bulk_sampler`)."""
    host_fsdp_layer_fwd_us: Figure = field(default_factory=lambda: Figure(value=0.0, source=HIDDEN_HOST))
    """Host time FSDP2 adds to one layer's forward beyond its collectives, microseconds (see HIDDEN_HOST)."""
    host_fsdp_layer_bwd_us: Figure = field(default_factory=lambda: Figure(value=0.0, source=HIDDEN_HOST))
    """The same for one layer's backward."""
    host_tp_layer_fwd_us: Figure = field(default_factory=lambda: Figure(value=0.0, source=HIDDEN_HOST))
    """Host time DTensor tensor (and sequence) parallelism adds to one layer's forward beyond its collectives."""
    host_tp_layer_bwd_us: Figure = field(default_factory=lambda: Figure(value=0.0, source=HIDDEN_HOST))
    """The same for one layer's backward."""


@dataclass(frozen=True, kw_only=True)
class Accelerator:
    """One GPU model. Units are in the field names; SI conversions are properties."""

    name: str
    """Display name."""
    memory_gib: float
    """Device memory capacity, GiB (a datasheet's "80GB" HBM is 80 GiB: 81920 MiB on A100 80GB)."""
    memory_bandwidth_gb_per_s: float
    """HBM bandwidth, GB/s (1e9 bytes/s)."""
    peak_tflops: dict[str, float]
    """Dense (no 2:4 sparsity) peak TFLOP/s per dtype."""
    scale_up_link: str
    """Name of the scale-up interconnect (NVLink 4, xGMI, ...)."""
    scale_up_bandwidth_gb_per_s: float
    """Scale-up bandwidth per GPU per direction, GB/s."""
    pcie_bandwidth_gb_per_s: float
    """Host link bandwidth per direction, GB/s."""
    tdp_w: float
    """Board power, W."""
    source: str
    """Datasheet URL(s)."""
    efficiency: Efficiency
    """Achievable fractions of the peaks above."""
    streaming_multiprocessors: int = 0
    """SMs (compute units) on the chip; 0: not stated. With :attr:`max_threads_per_sm` and :attr:`max_blocks_per_sm`
    it sets how many thread blocks of a kernel run at once (:mod:`plait.workloads.gnn.batch_norm`)."""
    max_threads_per_sm: int = 0
    """Most resident threads per SM (CUDA C++ Programming Guide, compute capability table); 0: not stated."""
    max_blocks_per_sm: int = 0
    """Most resident thread blocks per SM (the same table); 0: not stated."""
    asynchronous_launch: bool = True
    """Whether the host enqueues work that the device runs later (a GPU's launch queue: the host stream and the device
    stream overlap, a pass takes the longer of the two) or runs each op itself before issuing the next (a CPU device:
    a pass takes their sum). :func:`plait.cost.host.exposed_host_s` joins the two streams by it."""
    asynchronous_launch_source: str = ASYNCHRONOUS_LAUNCH
    """Where :attr:`asynchronous_launch` comes from."""
    note: str = ""
    """Caveats (sparse peaks halved, GB vs GiB, ...)."""
    extra: dict[str, str] = field(default_factory=dict)
    """Other provenance text no computation reads."""
    roofline_cache: dict[tuple[str, bool], Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    """GEMM rooflines by (dtype, weight gradient), derived from the figures above alone and kept on first use
    (:func:`plait.cost.compute.roofline_of`); not part of the description."""

    def __post_init__(self) -> None:
        for name in ("memory_gib", "memory_bandwidth_gb_per_s", "scale_up_bandwidth_gb_per_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{self.name}: {name}={getattr(self, name)} must be > 0")
        for name in ("streaming_multiprocessors", "max_threads_per_sm", "max_blocks_per_sm"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{self.name}: {name}={getattr(self, name)} must be >= 0 (0: not stated)")
        if not self.asynchronous_launch_source.strip():
            raise ConfigError(f"{self.name}: asynchronous_launch needs a source (asynchronous_launch_source)")
        if "bf16" not in self.peak_tflops and "fp16" not in self.peak_tflops:
            raise ConfigError(f"{self.name}: peak_tflops needs a bf16 or fp16 entry")

    @property
    def memory_bytes(self) -> float:
        """Device memory capacity in bytes."""
        return self.memory_gib * GIB

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        """HBM bandwidth in bytes/s."""
        return self.memory_bandwidth_gb_per_s * GB

    @property
    def has_matrix_units(self) -> bool:
        """Whether 16-bit GEMMs run on matrix units (tensor cores, matrix cores) apart from the fp32 vector units: the
        datasheet lists bf16 or TF32 (Ampere, Ada, Hopper, Blackwell, CDNA 2 and later), or its 16-bit peak is well
        above twice the fp32 one (Volta and Turing: 8x). Without them (Kepler, Pascal) 16-bit arithmetic runs on the
        fp32 cores, at most two half2 operations per fp32 one (Pascal whitepaper: 21.2 and 10.6 TFLOPS on P100 SXM2),
        so one GEMM curve describes both."""
        peaks = self.peak_tflops
        if "bf16" in peaks or "tf32" in peaks or "fp32" not in peaks:
            return True
        return peaks.get("fp16", 0.0) > 2.5 * peaks["fp32"]

    def arithmetic(self, dtype: str) -> str:
        """The precision a plan's ``dtype`` matmuls run in here: bf16 and fp16 stand in for each other where the
        datasheet lists only one of them (Volta, Turing, Pascal and Kepler have no bf16 arithmetic: NVIDIA's V100,
        T4, P100 and K80 datasheets list fp16 and fp32 only; an AMP run there is fp16 with loss scaling); any other
        ``dtype`` as it is."""
        if dtype in ("bf16", "fp16") and dtype not in self.peak_tflops:
            other = "fp16" if dtype == "bf16" else "bf16"
            if other in self.peak_tflops:
                return other
        return dtype

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype`` (fp16 and bf16 stand in for each other, :meth:`arithmetic`; raises if
        absent)."""
        key = self.arithmetic(dtype)
        if key not in self.peak_tflops:
            raise ConfigError(f"precision={dtype} is not supported by {self.name} (peaks known: {', '.join(self.peak_tflops)})")
        return self.peak_tflops[key] * 1e12
