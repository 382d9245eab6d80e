"""Gradient accumulation's device work: each micro-batch after the first adds its gradients into those held.

PyTorch's autograd hands a parameter's new gradient to ``AccumulateGrad``: the first micro-batch's becomes ``.grad``
without a kernel, every later one is added in place (torch/csrc/autograd/functions/accumulate_grad.h,
``accumulateGrad``: ``variable_grad += new_grad`` once ``.grad`` is defined), a memory-bound kernel that reads the
held gradient and the new one and writes the sum: three gradient-sized sweeps per parameter. A step of ``m``
micro-batches runs ``m - 1`` of them (Goyal et al. 2017 and DeepLearningExamples' BERT accumulate this way; the
optimizer steps once). The trace of one micro-batch does not see them. Assumed: apex amp's O2 mode, which accumulates
fp16 model gradients into fp32 master gradients (apex/amp/_process_optimizer.py, ``multi_tensor_axpby``: 2 + 4 + 4
bytes per parameter), is costed at the gradients' own width (3 x 4 bytes), within a fifth of it.
"""

from __future__ import annotations

from plait.cost.compute import memory_bytes_per_s
from plait.hardware.accelerator import Accelerator

ACCUMULATE_SWEEPS = 3
"""Gradient-sized sweeps of one in-place accumulation: read the held gradient, read the new one, write the sum."""


def accumulation_s(num_params: float, grad_bytes: float, micro_batches: int, acc: Accelerator) -> float:
    """Seconds a step of ``micro_batches`` spends adding ``num_params`` gradients of ``grad_bytes`` each into those
    held, at the sustained memory bandwidth (module docstring); none with one micro-batch."""
    adds = max(micro_batches - 1, 0)
    return adds * ACCUMULATE_SWEEPS * grad_bytes * num_params / memory_bytes_per_s(acc)
