"""A softmax and the dropout on its output run as one kernel each way, as a fusing compiler runs attention
probabilities (NVFuser under TorchScript: BERT's ``softmax`` then ``dropout`` between its two batched GEMMs).

TorchScript differentiates ``dropout`` on CUDA as ``mask = rand_like(input) < 1 - p`` and ``res = mask * input /
(1 - p)``, saving the boolean ``mask`` for ``grad_input = grad_output * mask / (1 - p)`` (torch/csrc/jit/runtime/
symbolic_script.cpp, ``dropout``, the CUDA branch); NVFuser fuses those pointwise steps with the softmax before them
and the softmax's backward after them (its parser registers softmax and its backward as normalizations that fuse
with pointwise neighbours: torch/csrc/jit/codegen/cuda/parser.cpp). Per element of ``e`` bytes:

- forward: one kernel reads the scores and writes the probabilities (saved for the softmax's backward), the dropped
  probabilities (the second GEMM's operand, saved for its backward) and the one-byte mask -- the trace's separate
  softmax and ``native_dropout`` also read the probabilities back, ``e`` bytes the fused kernel does not move;
- backward: one kernel reads the gradient, the mask and the probabilities and writes the scores' gradient -- the
  trace's ``native_dropout_backward`` writes the probabilities' gradient and ``_softmax_backward_data`` reads it back,
  ``2e`` bytes the fused kernel does not move.

So each ``native_dropout`` that directly follows a ``_softmax`` joins it (its bytes less its input's), and its
backward joins the softmax's backward with its mask's bytes alone. A dropout elsewhere stays its own kernel.
"""

from __future__ import annotations

from dataclasses import replace

from plait.workloads.traced.model import Kernel, TracedWorkload
from plait.workloads.traced.timing import ELEMENT_BYTES

SOFTMAX, SOFTMAX_BACKWARD = ("_softmax", "softmax"), "_softmax_backward_data"
DROPOUT, DROPOUT_BACKWARD = "native_dropout", "native_dropout_backward"
"""Traced (aten) operators: the softmax forward and backward, the dropout forward and backward."""


def _fuse_forward(kernels: list[Kernel], element: int) -> tuple[list[Kernel], list[bool]]:
    """The forward kernels with every dropout that follows a softmax folded into it; and, dropout by dropout in
    forward order, whether it was folded."""
    out: list[Kernel] = []
    folded: list[bool] = []
    for kernel in kernels:
        if kernel.name != DROPOUT:
            out.append(kernel)
            continue
        moved = [i for i, k in enumerate(out) if k.bytes_per_example > 0]  # past zero-byte counter updates
        last = moved[-1] if moved else None
        if last is not None and out[last].name in SOFTMAX:
            read = kernel.bytes_per_example * element / (2 * element + 1)  # of input e, output e and mask 1
            out[last] = replace(out[last], bytes_per_example=out[last].bytes_per_example
                                + kernel.bytes_per_example - read)
            folded.append(True)
        else:
            out.append(kernel)
            folded.append(False)
    return out, folded


def _fuse_backward(kernels: list[Kernel], pending: list[bool], carry: float,
                   element: int) -> tuple[list[Kernel], float]:
    """One unit's backward kernels with the backward of each folded dropout joined to the softmax backward after it
    (its mask's read alone added); ``pending``: the dropouts still to meet, in backward order (consumed);
    ``carry``: mask bytes still to add, returned with what is left."""
    out: list[Kernel] = []
    for kernel in kernels:
        if kernel.name == DROPOUT_BACKWARD and pending and pending.pop(0):
            carry += kernel.bytes_per_example / (2 * element + 1)  # the mask, of gradient in e, mask 1, out e
            continue
        if carry and kernel.name == SOFTMAX_BACKWARD:
            kernel, carry = replace(kernel, bytes_per_example=kernel.bytes_per_example + carry), 0.0
        out.append(kernel)
    return out, carry


def fuse_softmax_dropout(work: TracedWorkload) -> TracedWorkload:
    """``work`` with each softmax and the dropout on its output one kernel forward and one backward (module
    docstring). The backward meets the dropouts in reverse: units last to first, each unit's backward kernels in
    their order (a model traced as its children holds every backward kernel in its last unit)."""
    element = ELEMENT_BYTES[work.dtype]
    forwards, folded = [], []
    for unit in work.units:
        forward, unit_folded = _fuse_forward([k for k in unit.kernels if not k.backward], element)
        forwards.append(forward)
        folded += unit_folded
    pending, carry = list(reversed(folded)), 0.0
    backwards: list[list[Kernel]] = [[] for _ in work.units]
    for i in reversed(range(len(work.units))):
        backwards[i], carry = _fuse_backward([k for k in work.units[i].kernels if k.backward], pending, carry,
                                             element)
    units = tuple(replace(unit, kernels=tuple(f + b)) for unit, f, b in zip(work.units, forwards, backwards,
                                                                             strict=True))
    return replace(work, units=units)
