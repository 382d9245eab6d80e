"""A training-mode ``BatchNorm1d`` over an ``(n, b)`` fp32 input on a GPU: which PyTorch kernels run it, and their
time.

PyTorch 1.8 and before (``per_channel``) send a 2-D training input to cuDNN only up to
:data:`CUDNN_2D_MAX_ROWS` rows (``aten/src/ATen/native/Normalization.cpp`` at v1.8.1, ``_batch_norm_impl_index``:
``input.dim() == 2 && input.size(0) <= 131070 && training``); above it ATen's own kernels run
(``aten/src/ATen/native/cuda/Normalization.cuh`` before PR #57034, https://github.com/pytorch/pytorch/pull/57034,
read from copies of the file of that period: ``batch_norm_cuda_template`` and ``batch_norm_backward_cuda_template``).
They reshape ``(n, b)`` to ``(n, b, 1)`` and loop over the size-1 last dimension with ``threadIdx.x``, so of each
warp only lane 0 works:

- ``batch_norm_collect_statistics_kernel``: ``blocks(b)``, ``threads(getNumThreads(1) = 32, MAX_BLOCK_SIZE / 32 =
  16)``: each channel's 16 working lanes walk ``ceil(n / 16)`` rows apiece (``batch += blockDim.y``), a Welford
  update after each read;
- ``batch_norm_transform_input_kernel``: ``blocks_trans(b, min(256 * 1024 / b, ceil(n / tb)))``,
  ``threads_trans(tf, tb)`` with ``tf = max(getNumThreads(1 / 4), min(getNumThreads(1), 64)) = 32`` and
  ``tb = max(64 / tf, 1) = 2``: two working lanes a block, each over ``ceil(n / (2 grid_y))`` rows;
- backward, ``batch_norm_backward_kernel``: ``blocks(b)``, ``threads(32, 16)``: the per-channel sums of the output's
  gradient and of its product with the centred input (``reduce`` with ``GradOp``), then the input's gradient, each
  a walk of ``ceil(n / 16)`` rows per working lane.

Each walk is a loop over rows whose body reads the row (the inner loop over the size-1 dimension holds one read and
runs once), uses it and, in order, only then reaches the next row's read: one read in flight per lane (assumed: the
compiler neither unrolls the outer loop, which holds the inner one, nor moves the next row's read ahead of the
arithmetic; a GPU issues each warp's instructions in order). A channel's values lie 4b bytes apart, one a row; the
8 channels of a 32-byte sector are read by 8 blocks that start together and run the same loop, so each read waits
for the sector's one fill from DRAM: a dependent read at the GPU's pointer-chase latency (a lower bound: the arithmetic
between reads is not counted). So a walk takes ``ceil(n / 16) x latency`` for each round of channel blocks
the SMs hold at once (``b`` blocks of 512 threads: 4 an SM on compute capability 7.0, assumed to fit its registers),
and the transform ``ceil(blocks / resident blocks) x ceil(n / (2
grid_y)) x latency``. The bytes these kernels stream are a small share of the HBM's rate at this pace (on a V100,
ogbn-arxiv's 169,343 x 256: 173 MB a walk in 3.2 ms, 55 GB/s), so each kernel is latency-bound; the time charged is
the larger of this bound and :data:`BATCH_NORM_VALUES` at the HBM's rate.

``fused``: PyTorch from the PR on (assumed from 1.9: released June 2021, after the PR's resubmission, #57785, in May
2021) runs 2-D inputs on its channels-last kernels, which stream :data:`BATCH_NORM_VALUES`.
"""

from __future__ import annotations

from math import ceil
from typing import TYPE_CHECKING, Literal

from plait.errors import ConfigError

if TYPE_CHECKING:
    from plait.hardware.accelerator import Accelerator

BatchNormKernels = Literal["fused", "per_channel"]
BATCH_NORM_KERNELS: tuple[BatchNormKernels, ...] = ("fused", "per_channel")
CUDNN_2D_MAX_ROWS = 131_070
"""Most rows of a 2-D training input PyTorch 1.8 hands to cuDNN (``Normalization.cpp``, module docstring)."""
PER_CHANNEL_TORCH = (1, 8)
"""The last PyTorch release whose CUDA batch norm of a 2-D training input leaves cuDNN above 131,070 rows for ATen's
per-channel kernels (module docstring); a source's release up to it takes them."""
MAX_BLOCK_SIZE = 512
"""``MAX_BLOCK_SIZE`` of ``Normalization.cuh`` (CUDA builds)."""
WARP_THREADS = 32
"""``getNumThreads(1)``: the smallest block width of ``Normalization.cuh``, one warp."""
STATS_LANES = MAX_BLOCK_SIZE // WARP_THREADS
"""Working lanes per channel in the statistics and backward kernels: ``blockDim.y`` = 512 / 32 = 16."""
TRANSFORM_LANES = 2
"""Working lanes per block of the transform kernel: ``tb = max(64 / tf, 1)`` with ``tf`` = 32."""
TRANSFORM_GRID_Y_CAP = 256 * 1024
"""``blocks_trans.y = min(256 * 1024 / b, ceil(n / tb))``."""
BATCH_NORM_VALUES = (3, 5)
"""fp32 values a training-mode ``BatchNorm1d`` over an ``(n, b)`` input streams per element, forward and backward:
PyTorch's CUDA kernels for a 2-D input (aten/src/ATen/native/cuda/Normalization.cu, the channels-last kernels it
picks for ``ndimension() == 2``) read the input for the per-channel statistics, then read it and write the output;
backward they read the input and the output's gradient for the per-channel sums, then read both again and write the
input's gradient (the per-channel vectors are ``b`` values, negligible)."""


def release_kernels(release: str) -> BatchNormKernels:
    """A PyTorch release (``1.8.1``; empty: not stated) as the kernels of its CUDA batch norms."""
    if not release:
        return "fused"
    parts = release.split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts):
        raise ConfigError(f"PyTorch release {release!r} must be empty or like 1.8.1")
    return "per_channel" if (int(parts[0]), int(parts[1])) <= PER_CHANNEL_TORCH else "fused"


def takes_per_channel_path(kernels: BatchNormKernels, rows: float) -> bool:
    """Whether a training batch norm of ``rows`` rows runs ATen's per-channel kernels (module docstring)."""
    return kernels == "per_channel" and rows > CUDNN_2D_MAX_ROWS


def per_channel_latency_s(rows: float, channels: int, acc: Accelerator) -> tuple[float, float]:
    """Forward and backward seconds of ATen's per-channel kernels on ``rows x channels`` (module docstring): the
    statistics walk and the transform forward, two walks backward, each read waiting one DRAM latency; (0, 0) where
    the accelerator states no latency or no residency limits."""
    latency_s = acc.efficiency.dram_latency_ns.value * 1e-9
    sms, threads_per_sm, blocks_per_sm = acc.streaming_multiprocessors, acc.max_threads_per_sm, acc.max_blocks_per_sm
    if latency_s <= 0 or not (sms and threads_per_sm and blocks_per_sm):
        return 0.0, 0.0
    if threads_per_sm < MAX_BLOCK_SIZE:
        raise ConfigError(f"{acc.name}: max_threads_per_sm={threads_per_sm} holds no {MAX_BLOCK_SIZE}-thread block "
                          "of ATen's batch-norm kernels")
    walk_waves = ceil(channels / (sms * min(blocks_per_sm, threads_per_sm // MAX_BLOCK_SIZE)))
    walk_s = walk_waves * ceil(rows / STATS_LANES) * latency_s
    grid_y = max(1, min(TRANSFORM_GRID_Y_CAP // channels, ceil(rows / TRANSFORM_LANES)))
    transform_threads = TRANSFORM_LANES * WARP_THREADS  # 64 threads a block
    resident = sms * min(blocks_per_sm, threads_per_sm // transform_threads)
    transform_s = ceil(channels * grid_y / resident) * ceil(rows / (TRANSFORM_LANES * grid_y)) * latency_s
    return walk_s + transform_s, 2 * walk_s
