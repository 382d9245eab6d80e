"""Bytes a batch or layer normalization moves as it runs, beyond the operands its trace counts once.

Batch normalization in training normalizes each channel by the mean and variance of that channel over the whole
micro-batch (Ioffe & Szegedy, "Batch Normalization", ICML 2015, Algorithm 1), so no element's output can be written
before every element of its channel has been read; its backward likewise needs the channel sums of ``dy`` and
``dy * x_hat`` before any element's input gradient (ibid., Sec. 3, the chain rule for ``dl/dx_i``). Where a channel
outweighs what the chip holds on die, each pass is a separate sweep over HBM:

- forward: read ``x`` for the statistics, read ``x`` again and write ``y`` -- 3 activation passes where the trace's
  operands are 2 (``x`` in, ``y`` out);
- backward: read ``dy`` and ``x`` for the two sums, read both again and write ``dx`` -- 5 passes where the trace's
  operands are 3 (``dy`` and ``x`` in, ``dx`` out).

PyTorch's CUDA kernels run exactly these sweeps (aten/src/ATen/native/cuda/Normalization.cuh:
``batch_norm_collect_statistics_kernel`` then ``batch_norm_transform_input_kernel``; ``batch_norm_backward_kernel``
reduces ``grad_output`` and ``input`` over a channel's plane, then loops over the plane again reading both to write
``grad_input``; ``batch_norm_backward_reduce_kernel`` then ``batch_norm_backward_elemt`` in the channels-last and
synchronized paths). Assumed: cuDNN's batch normalization, which PyTorch calls for most CUDA inputs, is bound by the
same statistics-before-output dependency; at the validated rows' micro-batches a channel of one layer (e.g. 256 x
56 x 56 fp16 elements, 1.6 MB, one per SM at once: over 100 MB in flight) is far beyond a V100's 6 MB or an A100's
40 MB L2, so the second sweep reaches HBM. The per-channel statistics, weights and running averages are the
operator's fixed bytes and move once.

Layer normalization's forward holds each row (one example's features) on chip for its statistics: its traced
operands, ``x`` in and ``y`` out, are its sweeps. Its backward is two reductions in different directions: the input
gradient per row (on chip, like the forward) and the weight and bias gradients per feature, summed over every row,
which PyTorch runs as a separate kernel that reads ``dY`` and ``X`` again (aten/src/ATen/native/cuda/
layer_norm_kernel.cu: the input-gradient kernel, then ``GammaBetaBackwardCUDAKernel``; NVIDIA apex's
``FusedLayerNorm`` likewise, csrc/layer_norm_cuda_kernel.cu: ``cuComputePartGradGammaBeta`` then
``cuComputeGradInput``) -- 5 activation sweeps where the trace's operands are 3.
"""

from __future__ import annotations

from dataclasses import replace

from plait.workloads.traced.model import Kernel

SWEEPS: dict[str, tuple[int, int]] = {
    "native_batch_norm": (3, 2), "_native_batch_norm_legit": (3, 2),
    "_native_batch_norm_legit_functional": (3, 2), "cudnn_batch_norm": (3, 2),
    "native_batch_norm_backward": (5, 3), "cudnn_batch_norm_backward": (5, 3),
    "native_layer_norm_backward": (5, 3)}
"""Traced (aten) normalization operator -> (activation-sized sweeps it runs over HBM, activation-sized operands its
trace counts): batch normalization's two passes forward and backward, layer normalization's second backward sweep
for its weight and bias gradients (module docstring)."""


def kernel_moved_bytes(kernel: Kernel, batch: float) -> float:
    """Bytes ``kernel`` moves on ``batch`` examples: its traced operands once, a normalization's
    activation-sized operands as many times as its sweeps read or write them (:data:`SWEEPS`)."""
    swept, traced = SWEEPS.get(kernel.name, (1, 1))
    return kernel.fixed_bytes + kernel.bytes_per_example * batch * swept / traced


def with_extra_bytes(kernel: Kernel, extra_bytes_per_example: float) -> Kernel:
    """``kernel`` moving ``extra_bytes_per_example`` more per example, once (a fused neighbour's operands): added
    to its traced operands divided by its sweep ratio, which :func:`kernel_moved_bytes` multiplies back."""
    swept, traced = SWEEPS.get(kernel.name, (1, 1))
    return replace(kernel, bytes_per_example=kernel.bytes_per_example + extra_bytes_per_example * traced / swept)
