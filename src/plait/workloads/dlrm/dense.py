"""Device time of a DLRM's dense part on one rank for one step: the bottom and top MLPs and the interaction,
forward and backward, kernel by kernel at the accelerator's rooflines (:mod:`plait.cost.compute`).

Per linear layer ``a -> b`` on ``B`` samples (Naumov et al., arXiv 1906.00091, Sec. 3; the MLPs of
facebookresearch/dlrm ``dlrm_s_pytorch.py`` ``create_mlp`` and of NVIDIA's DeepLearningExamples DLRM, apex's
fused MLP, ``apex/mlp/mlp.py``):

- forward: the GEMM ``B x b x a`` and one kernel adding the bias and applying the ReLU, reading and writing
  ``B b`` activations (apex ``mlp_cuda.cu`` runs cuBLAS then ``biasAddRelu_fprop``); the top MLP's last layer
  has no ReLU (its logit goes to the sigmoid of the loss), its bias add is the same pass;
- backward: the ReLU's mask applied to the incoming gradient (reads it and the output, writes the gradient), the
  bias gradient (a column sum, one more read), the input-gradient GEMM ``B x a x b`` (not for the bottom MLP's
  first layer: the dense features take no gradient) and the weight-gradient GEMM ``a x b x B`` (at the
  accelerator's weight-gradient curve where it has one), each GEMM as :meth:`_Roofline.time_s` times it
  (compute, memory or one kernel launch, whichever is longest).

The interaction, one kernel each way, memory- or compute-bound: ``dot`` reads the ``T + 1`` vectors of width ``d``
per sample and writes the top MLP's input (the bottom output beside the ``(T + 1) T / 2`` dot products), ``2 (T +
1)^2 d`` FLOPs (the whole Gram matrix, :meth:`DlrmSpec.mlp_flops_per_sample`); backward reads the output's gradient
and the vectors again and writes their gradients, twice the FLOPs (NVIDIA's fused ``dot_based_interact`` kernels,
DeepLearningExamples ``dlrm/cuda_src/dot_based_interact_ampere``, one launch each way); ``cat`` copies the vectors
into the top MLP's input and splits its gradient back (a read and a write each way). Activations are 2 bytes in
16-bit runs, 4 in fp32 and TF32 runs.
"""

from __future__ import annotations

import itertools

from plait.cost.compute import roofline_of
from plait.hardware.accelerator import Accelerator
from plait.workloads.dlrm.model import DlrmSpec

ACTIVATION_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}
"""Bytes of an activation element in each precision of the dense part (module docstring)."""


def _pass_s(acc: Accelerator, num_bytes: float, flops: float = 0.0, dtype: str = "fp32") -> float:
    """One kernel: its bytes at the sustained bandwidth or its FLOPs at the ``dtype`` peak, never under a launch."""
    roofline = roofline_of(acc, dtype)
    longest = num_bytes / roofline.memory_bytes_per_s
    if flops:
        longest = max(longest, flops / roofline.peak_flops)
    return max(longest, roofline.launch_s)


def mlp_s(widths: tuple[int, ...], acc: Accelerator, batch: int, precision: str, input_grad: bool = True) -> float:
    """Seconds of one MLP of layer ``widths`` (input first) forward and backward on ``batch`` samples; without
    ``input_grad`` its first layer computes no gradient of its input (module docstring)."""
    dtype, e = acc.arithmetic(precision), ACTIVATION_BYTES[precision]
    gemm, wgrad = roofline_of(acc, dtype), roofline_of(acc, dtype, weight_gradient=True)
    total = 0.0
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        total += gemm.time_s(batch, b, a)  # forward
        total += _pass_s(acc, 2.0 * batch * b * e)  # bias (+ ReLU)
        total += _pass_s(acc, 3.0 * batch * b * e)  # ReLU's backward
        total += _pass_s(acc, 1.0 * batch * b * e)  # bias gradient
        if input_grad or i > 0:
            total += gemm.time_s(batch, a, b)  # input gradient
        total += wgrad.time_s(a, b, batch)  # weight gradient
    return total


def bottom_s(spec: DlrmSpec, acc: Accelerator, batch: int, precision: str) -> float:
    """The bottom MLP forward and backward on ``batch`` samples (its input, the dense features, takes no gradient)."""
    return mlp_s((spec.dense_features, *spec.bottom_mlp), acc, batch, precision, input_grad=False)


def top_s(spec: DlrmSpec, acc: Accelerator, batch: int, precision: str) -> float:
    """The interaction and the top MLP forward and backward on ``batch`` samples (module docstring)."""
    e = ACTIVATION_BYTES[precision]
    vectors, width = len(spec.deep_tables) + 1, spec.interaction_width()
    features = batch * (sum(t.dim for t in spec.deep_tables) + spec.dense_width)
    if spec.interaction == "cat":
        interaction = 2 * _pass_s(acc, 2.0 * batch * width * e)
    else:
        dtype = acc.arithmetic(precision)
        flops = 2.0 * vectors * vectors * spec.dense_width * batch
        interaction = _pass_s(acc, (features + batch * width) * e, flops, dtype)
        interaction += _pass_s(acc, (2 * features + batch * width) * e, 2 * flops, dtype)
    return interaction + mlp_s((width, *spec.top_mlp), acc, batch, precision)


def dense_s(spec: DlrmSpec, acc: Accelerator, batch: int, precision: str) -> float:
    """Seconds of the dense part's forward and backward on one rank of ``batch`` samples (module docstring)."""
    return bottom_s(spec, acc, batch, precision) + top_s(spec, acc, batch, precision)
