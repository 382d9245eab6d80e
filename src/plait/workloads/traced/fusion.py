"""Batch normalization fused with the ReLU (and the residual add) that follow it, as MXNet's float16 ResNet-50 runs.

NVIDIA's MXNet ResNet-50 (DeepLearningExamples ``MxNet/Classification/RN50v1.5/resnet.py``, ``residual_unit``) with
``--fuse-bn-relu 1`` builds each batch normalization that a ReLU follows as ``mx.sym.BatchNorm(..., act_type='relu')``
and drops the separate ``Activation``; with ``--fuse-bn-add-relu 1`` it builds the last normalization of each
residual unit as ``mx.sym.BatchNormAddRelu(data, addend=shortcut)`` and drops the ``+ shortcut`` and its ReLU. Its
runner passes both for float16 (the rows' notes). The NHWC kernels behind them are NVIDIA's, published in apex
(``apex/contrib/groupbn/batch_norm.py``, ``BatchNorm2d_NHWC``; assumed: the same kernels as the containers'
MXNet operators, whose source is not public):

- BN-ReLU: the forward writes ``max(0, y)`` in the normalization's own output pass; the backward
  (``bn_bwd_nhwc(x, grad_y, ..., fuse_relu)``) recomputes the ReLU's mask from ``x``, which it reads anyway -- the
  ReLU's forward and backward passes are gone, nothing is added;
- BN-add-ReLU: the forward (``bn_addrelu_fwd_nhwc(x, z, ..., bitmask)``) also reads the addend ``z`` and writes
  a mask of one bit per element; the backward (``bn_addrelu_bwd_nhwc``) reads that mask and writes the addend's
  gradient ``dz`` -- the add's and the ReLU's passes are gone, one activation pass (plus the bit mask) is added
  each way.

The normalization's own sweeps stay as :mod:`.normalization` counts them.
"""

from __future__ import annotations

from dataclasses import replace

from plait.workloads.traced.model import Kernel, TracedWorkload
from plait.workloads.traced.normalization import SWEEPS, with_extra_bytes
from plait.workloads.traced.timing import ELEMENT_BYTES

RELU, RELU_BACKWARD, RESIDUAL_ADDS = ("relu", "relu_"), "threshold_backward", ("add", "add_")
"""Traced (aten) operators: the ReLU forward, its backward, and the residual add (in place or not)."""
def _is_norm(kernel: Kernel) -> bool:
    return kernel.name in SWEEPS and "batch_norm" in kernel.name


def _fuse_forward(kernels: list[Kernel], mask_per_byte: float, add_relu: bool) -> tuple[list[Kernel], list[bool | None]]:
    """The forward kernels with every ReLU that follows a batch normalization, directly or through a residual add,
    folded into it; and, ReLU by ReLU in forward order, ``None`` (not fused), ``False`` (BN-ReLU) or ``True``
    (BN-add-ReLU)."""
    out: list[Kernel] = []
    kinds: list[bool | None] = []
    for kernel in kernels:
        if kernel.name not in RELU:
            out.append(kernel)
            continue
        moved = [i for i, k in enumerate(out) if k.bytes_per_example > 0]  # past the counters' zero-byte updates
        last = out[moved[-1]] if moved else None
        before = moved[-2] if len(moved) > 1 else None
        if last is not None and _is_norm(last):
            kinds.append(False)
        elif add_relu and last is not None and last.name in RESIDUAL_ADDS and before is not None and _is_norm(out[before]):
            addend = kernel.bytes_per_example / 2  # the ReLU's input, one of its two operands
            out[before] = with_extra_bytes(out[before], addend * (1 + mask_per_byte))  # z in, mask out
            del out[moved[-1]]
            kinds.append(True)
        else:
            out.append(kernel)
            kinds.append(None)
    return out, kinds


def _fuse_backward(kernels: list[Kernel], kinds: list[bool | None], mask_per_byte: float) -> list[Kernel]:
    """The backward kernels with the ReLU backward of each fused ReLU folded into the normalization backward
    that follows it: nothing added for BN-ReLU, the addend's gradient out and the mask in for BN-add-ReLU."""
    out: list[Kernel] = []
    pending = list(reversed(kinds))  # the backward meets the ReLUs in reverse order
    carry = 0.0
    for kernel in kernels:
        if kernel.name == RELU_BACKWARD and pending:
            kind = pending.pop(0)
            if kind is not None:
                carry = kernel.bytes_per_example / 3 * (1 + mask_per_byte) if kind else 0.0  # of dy, y in; dx out
                continue
        if carry and _is_norm(kernel):
            kernel, carry = with_extra_bytes(kernel, carry), 0.0
        out.append(kernel)
    return out


def fuse_bn_relu(work: TracedWorkload, add_relu: bool) -> TracedWorkload:
    """``work`` with each batch normalization fused with the ReLU after it, and with ``add_relu`` with the
    residual add and ReLU after it (module docstring)."""
    mask_per_byte = 1 / (8 * ELEMENT_BYTES[work.dtype])
    units = []
    for unit in work.units:
        forward, kinds = _fuse_forward([k for k in unit.kernels if not k.backward], mask_per_byte, add_relu)
        backward = _fuse_backward([k for k in unit.kernels if k.backward], kinds, mask_per_byte)
        units.append(replace(unit, kernels=tuple(forward + backward)))
    return replace(work, units=tuple(units))
