"""fp32 convolutions at cuDNN's measured rates (plait.workloads.traced.timing.conv_fp32_flops_per_s): which traced
convolutions take Winograd's shape, Winograd's multiply counts, and DeepBench's V100 timings of single layers."""

from __future__ import annotations

import pytest

from plait.hardware.catalog import get_accelerator
from plait.workloads.traced.timing import kernel_s
from plait.workloads.traced.winograd import winograd_reduction

torch = pytest.importorskip("torch")

from plait.workloads.traced.tracing import trace_factory


@pytest.mark.parametrize(("m", "r", "reduction"), [(2, 3, 36 / 16), (4, 3, 144 / 36), (6, 3, 324 / 64)])
def test_winograd_multiplies_follow_lavin_and_gray(m: int, r: int, reduction: float) -> None:
    """Lavin & Gray 2016, Sec. 4: F(m x m, r x r) needs (m + r - 1)^2 multiplies where the direct convolution of
    the same m x m outputs needs m^2 r^2 (F(2x2, 3x3): 16 for 36; F(4x4, 3x3): 36 for 144)."""
    assert winograd_reduction(m, r) == pytest.approx(reduction)


def test_only_3x3_unit_stride_ungrouped_convolutions_take_winograds_shape() -> None:
    def layers() -> torch.nn.Module:
        return torch.nn.Sequential(
            torch.nn.Conv2d(4, 4, 3, padding=1),
            torch.nn.Conv2d(4, 4, 3, stride=2, padding=1),
            torch.nn.Conv2d(4, 4, 1),
            torch.nn.Conv2d(4, 4, 3, padding=2, dilation=2),
            torch.nn.Conv2d(4, 4, 3, padding=1, groups=2),
        )

    work = trace_factory(layers, "convs", (4, 8, 8), "float32", "float32")
    convs = [k for u in work.units for k in u.kernels if k.name.startswith("convolution")]
    forward = [k.winograd for k in convs if not k.backward]
    backward = [k.winograd for k in convs if k.backward]
    assert forward == [True, False, False, False, False]
    assert backward == forward  # each layer (a unit of its own) with its backward


@pytest.mark.parametrize(
    ("layer", "forward_ms", "backward_ms"),
    [
        (
            (256, 512, 3, 28),
            0.801,
            0.859 + 0.766,
        ),  # 'Vision' W = H = 28, C = 256, K = 512, 3x3, N = 16: WINOGRAD_NONFUSED
        ((64, 256, 1, 56), 0.161, None),
    ],
)  # 'Resnet' W = H = 56, C = 64, K = 256, 1x1, N = 16: IMPLICIT_PRECOMP_GEMM
def test_fp32_convolutions_on_v100_near_deepbench(
    layer: tuple[int, int, int, int], forward_ms: float, backward_ms: float | None
) -> None:
    """baidu-research/DeepBench@da81ba78 results/train/DeepBench_NV_V100.xlsx, 'Results FP32' (DGX-1 V100, cuDNN
    7.6.2): forward, wrt-inputs and wrt-parameters milliseconds of two layers at N = 16, within 40% (plait's curves
    are medians over many shapes). The 1x1 layer's backward (0.154 + 0.245 ms) is left out: plait runs it at the
    SGEMM curve, 0.20 ms, half DeepBench's (its filter gradient reaches 0.43 of the peak: plait/validate/data/
    classic_dp.md)."""
    c, k, r, hw = layer
    work = trace_factory(
        lambda: torch.nn.Sequential(torch.nn.Conv2d(c, k, r, padding=r // 2, bias=False)),
        "conv",
        (c, hw, hw),
        "float32",
        "float32",
    )
    acc = get_accelerator("v100")
    convs = {kern.backward: kern for u in work.units for kern in u.kernels if kern.name.startswith("convolution")}
    assert kernel_s(convs[False], 16, acc, "fp32", 4) * 1e3 == pytest.approx(forward_ms, rel=0.4)
    if backward_ms is not None:
        assert kernel_s(convs[True], 16, acc, "fp32", 4) * 1e3 == pytest.approx(backward_ms, rel=0.4)
