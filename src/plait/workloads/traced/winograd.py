"""Winograd's minimal filtering algorithms for convolutions (Lavin & Gray 2016, "Fast Algorithms for Convolutional
Neural Networks", CVPR): which traced convolutions have the shape cuDNN runs them on, and how many fewer multiplies
they do than the direct convolution whose FLOPs the trace counts."""

from __future__ import annotations

from typing import Any


def winograd_shape(op: str, args: tuple[Any, ...]) -> bool:
    """Whether ATen's ``convolution`` (``input, weight, bias, stride, padding, dilation, transposed, ...,
    groups``) or ``convolution_backward`` (``grad_output, input, weight, bias_sizes, stride, padding, dilation,
    transposed, ..., groups``) is a 2-D 3x3, stride-1, undilated, ungrouped, untransposed convolution: the shape
    cuDNN's Winograd algorithms take (cuDNN API reference, ``cudnnConvolutionFwdAlgo_t``:
    ``CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD`` requires a 3x3 filter; Lavin & Gray 2016, Sec. 4, F(m x m, 3 x 3) at
    unit stride)."""
    at = {"convolution": 3, "convolution_backward": 4}.get(op)  # where the stride is
    if at is None or len(args) < at + 6:
        return False
    weight, stride, dilation, transposed, groups = args[at - 2], args[at], args[at + 2], args[at + 3], args[at + 5]
    return (
        tuple(weight.shape[2:]) == (3, 3)
        and all(x == 1 for x in (*stride, *dilation))
        and not transposed
        and groups == 1
    )


def winograd_reduction(m: int, r: int) -> float:
    """Multiplies of a direct 2-D convolution with an ``r x r`` filter over those of Winograd's minimal algorithm
    F(m x m, r x r) for the same ``m x m`` outputs: ``m^2 r^2 / (m + r - 1)^2`` (Lavin & Gray 2016, "Fast
    Algorithms for Convolutional Neural Networks", Sec. 4: F(m x m, r x r) uses ``(m + r - 1)^2`` multiplies)."""
    return (m * r) ** 2 / (m + r - 1) ** 2


WINOGRAD_F4X4_REDUCTION = winograd_reduction(4, 3)
"""F(4x4, 3x3)'s multiply reduction (36 multiplies for 144: 4); the unit
:attr:`~plait.hardware.accelerator.Efficiency.conv3x3_fp32` is read in (:func:`plait.workloads.traced.timing.
conv_fp32_flops_per_s`)."""
