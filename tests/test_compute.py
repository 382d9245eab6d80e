"""GEMM efficiency is read at the square GEMM of equal arithmetic intensity (NVIDIA Matrix Multiplication
Background guide, Sec. 2)."""

from __future__ import annotations

import math

import pytest

from plait.cost.compute import attention_flops_per_s, gemm_time_s, matmul_flops_per_s
from plait.cost.flops import Gemm
from plait.hardware.catalog import get_accelerator

ACC = get_accelerator("h100-sxm-80gb")


def test_square_gemm_reads_the_curve_at_its_edge() -> None:
    g = Gemm(4096, 4096, 4096, 1)
    assert gemm_time_s(g, ACC, "bf16") == pytest.approx(g.flops / matmul_flops_per_s(ACC, "bf16", 4096))


def test_skinny_gemm_is_slower_than_a_square_one_of_equal_work() -> None:
    """8192 x 8192 x 128 does the work of a 2048^3 GEMM but has the intensity of a ~372-edge square."""
    skinny, square = Gemm(8192, 8192, 128, 1), Gemm(2048, 2048, 2048, 1)
    assert skinny.flops == square.flops
    assert gemm_time_s(skinny, ACC, "bf16") == pytest.approx(
        skinny.flops / matmul_flops_per_s(ACC, "bf16", 3 / (2 / 8192 + 1 / 128)))
    assert gemm_time_s(skinny, ACC, "bf16") > 1.5 * gemm_time_s(square, ACC, "bf16")


@pytest.mark.parametrize(("head_dim", "kernel"), [(64, 64), (80, 96), (112, 128), (128, 128), (192, 192), (200, 256)])
def test_flash_attention_runs_at_the_next_instantiated_head_dim(head_dim: int, kernel: int) -> None:
    """FlashAttention-2 has kernels for head dims 32, 64, ..., 192 and 256 (flash_api.cpp head_size_rounded)."""
    from dataclasses import replace

    from plait.cost.flops import attention_core_flops
    from plait.cost.setup import Setup
    from plait.engine.facts import EngineFacts
    from plait.hardware.catalog import get_cluster
    from plait.plan.plan import Plan
    from plait.workload.catalog import get_model

    base = get_model("llama3-8b")
    cluster = get_cluster("dgx-h100-ib")
    plan = Plan(micro_batch=1, global_batch=1).with_seq_len(base.seq_len)

    def flops(dim: int, framework: EngineFacts) -> float:
        model = replace(base, head_dim=dim)
        return attention_core_flops(Setup(model=model, cluster=cluster, plan=plan, framework=framework))

    assert flops(head_dim, EngineFacts()) / flops(64, EngineFacts()) == pytest.approx(kernel / 64)
    unfused = EngineFacts(attention_kernel="unfused")
    assert flops(head_dim, unfused) / flops(64, unfused) == pytest.approx(head_dim / 64)  # the math as written


def test_the_weight_gradient_gemm_reads_its_own_curve_where_the_accelerator_has_one() -> None:
    """A backward is an input-gradient and a weight-gradient GEMM; with a weight-gradient curve at half the square
    curve's fractions (a constant, so every GEMM is compute-bound at it), the backward of a large compute-bound
    GEMM grows by the weight gradient's own time, the forward not at all; the same curve as the square one changes
    nothing."""
    from dataclasses import replace

    from plait.cost.compute import gemms_fwd_bwd_s
    from plait.cost.setup import Setup
    from plait.engine.facts import DEFAULT
    from plait.hardware.catalog import get_cluster
    from plait.hardware.figure import Curve
    from plait.plan.plan import Plan
    from plait.workload.catalog import get_model

    cluster, g = get_cluster("dgx-h100-ib"), Gemm(8192, 8192, 8192, 1)
    flat = replace(ACC.efficiency, matmul_bf16=Curve(source="assumed: test", value=0.8))

    def passes(wgrad: Curve | None) -> tuple[float, float]:
        acc = replace(ACC, efficiency=replace(flat, matmul_bf16_wgrad=wgrad))
        setup = Setup(model=get_model("llama3-8b"), cluster=replace(cluster, accelerator=acc),
                      plan=Plan().with_seq_len(8192), framework=DEFAULT)
        return gemms_fwd_bwd_s([g], setup)

    plain, same, slow = passes(None), passes(Curve(source="assumed: test", value=0.8)), passes(
        Curve(source="assumed: test", value=0.4))
    one = g.flops / (ACC.peak_flops("bf16") * 0.8)
    assert plain == pytest.approx((one, 2 * one)) and same == plain
    assert slow == pytest.approx((one, one + 2 * one))


@pytest.mark.parametrize(("edge", "gb200_tflops"), [(8192, 2876.6), (16384, 2906.9)])
def test_b200_fp8_square_rate_past_4096_rises_as_the_measured_blackwell_sweep(edge: int, gb200_tflops: float) -> None:
    """B200 FP8 at 4096^3: 2765.0 TFLOP/s (OpenXLA sm_100 table); past it the rise of Azure's ND GB200 v6 cuBLASLt
    square sweep (2834.6 at 4096), never the MAMF best-shape maximum (3432.5)."""
    b200 = get_accelerator("b200")
    expected_tflops = round(2765.0 / 4500 * gb200_tflops / 2834.6, 3) * 4500  # the file keeps three decimals
    assert matmul_flops_per_s(b200, "fp8", edge) / 1e12 == pytest.approx(expected_tflops)
    assert matmul_flops_per_s(b200, "fp8", edge) < 3432.5e12


@pytest.mark.parametrize(("slug", "fwd_tflops", "bwd_tflops"), [("gb200", 1563.0, 1279.0), ("gb300", 1927.0, 1391.0)])
def test_blackwell_attention_at_8192_is_cudnn_918_fwd_and_bwd_combined(slug: str, fwd_tflops: float,
                                                                       bwd_tflops: float) -> None:
    """cudnn-frontend's cuDNN 9.18.1 Llama 3.1 sweep (causal bf16, seq 8192): the backward does 2.5x the forward's
    FLOPs, so the pair runs at 3.5 / (1/fwd + 2.5/bwd)."""
    acc = get_accelerator(slug)
    combined_tflops = 3.5 / (1 / fwd_tflops + 2.5 / bwd_tflops)
    assert attention_flops_per_s(acc, 8192) / 1e12 == pytest.approx(combined_tflops, rel=2e-3)  # file: 3 decimals


def test_a_curve_read_again_gives_what_a_fresh_curve_gives() -> None:
    """A curve keeps its last interpolation (a GEMM's backward asks for its forward's size again): any order of
    sizes, repeats among them, reads what a curve that never read before reads (hand-picked: 3 points, 2 segments)."""
    from plait.hardware.figure import Curve

    def fresh() -> Curve:
        return Curve(source="assumed: test", sizes=(64.0, 512.0, 4096.0), fractions=(0.2, 0.5, 0.8))

    curve = fresh()
    for size in (100.0, 100.0, 512.0, 3000.0, 100.0, 3000.0, 3000.0, 10.0, 100.0, 1e6, 700.0):
        assert curve.at(size) == fresh().at(size)
    assert fresh().at(512.0) == 0.5 and fresh().at(100.0) == pytest.approx(0.2 + 0.3 * math.log(100 / 64) / math.log(8))
