"""fp32 and tf32 plans: GEMMs at the fp32 or TF32 peak, 4-byte weights, activations and no master copy; tf32
refused in one line where the datasheet has no TF32 rate. Expected values are worked by hand from the datasheet
peaks (A100 SXM4 80GB: fp32 19.5, TF32 156, bf16 312 TFLOP/s) and the rules of :mod:`plait.cost.compute`."""

from __future__ import annotations

from dataclasses import replace

import pytest

from plait.cost.compute import gemm_time_s, mfu_peak_flops
from plait.cost.flops import Gemm
from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import get_accelerator, get_cluster
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.workload.catalog import get_model

A100 = get_accelerator("a100-80gb")
EDGE = 8192
BF16_FRACTION = 0.813  # efficiency.toml a100-80gb matmul_bf16 at 8192 (Azure cuBLASLt sweep 253.7 of 312)


def test_a_large_gemm_runs_at_the_fp32_and_tf32_peaks() -> None:
    """An 8192^3 GEMM is compute-bound: bf16 at 0.813 x 312, tf32 at 0.813 x 156 (the bf16 curve's fraction of the
    TF32 peak), fp32 at min(0.813 x 312, 19.5) = the whole fp32 peak (no fp32 curve: bf16's rate bounds it)."""
    flops = 2.0 * EDGE**3
    gemm = Gemm(EDGE, EDGE, EDGE, 1)
    bf16, tf32, fp32 = (gemm_time_s(gemm, A100, d) for d in ("bf16", "tf32", "fp32"))
    assert bf16 == pytest.approx(flops / (BF16_FRACTION * 312e12))
    assert tf32 == pytest.approx(flops / (BF16_FRACTION * 156e12)) == pytest.approx(2 * bf16)
    assert fp32 == pytest.approx(flops / 19.5e12)
    assert fp32 / bf16 == pytest.approx(BF16_FRACTION * 312 / 19.5)


def test_mfu_divides_by_the_peak_the_gemms_run_at() -> None:
    assert [mfu_peak_flops(A100, p) for p in ("bf16", "fp16", "tf32", "fp32")] == [312e12, 312e12, 156e12, 19.5e12]
    assert mfu_peak_flops(get_accelerator("h100-sxm-80gb"), "fp8") == 1978.9e12


PLAN = Plan(dp_shard=8, sharding="zero1", micro_batch=1, global_batch=8, seq_len=2048)


def _memory(precision: str) -> tuple[float, float, float]:
    est = estimate(get_model("llama3-8b"), get_cluster("dgx-a100-ib"), replace(PLAN, precision=precision),
                   engine=get_engine())
    return est.memory.weights_bytes, est.memory.optimizer_bytes, est.memory.activations_bytes


def test_fp32_weights_double_and_the_master_copy_goes() -> None:
    """bf16: 2-byte weights, AdamW 8 + master 4 = 12 bytes per parameter (sharded by zero1); fp32 and tf32:
    4-byte weights, 8 bytes of moments, no master copy (the weights are fp32)."""
    weights, optimizer, activations = _memory("bf16")
    for precision in ("fp32", "tf32"):
        w, o, a = _memory(precision)
        assert w == pytest.approx(2 * weights)
        assert o == pytest.approx(optimizer * 8 / 12)
        assert a > activations  # 4-byte activations


def test_fp32_step_is_slower_by_the_peak_ratio_on_compute() -> None:
    model, cluster = get_model("llama3-8b"), get_cluster("dgx-a100-ib")
    bf16 = estimate(model, cluster, PLAN, engine=get_engine())
    tf32 = estimate(model, cluster, replace(PLAN, precision="tf32"), engine=get_engine())
    fp32 = estimate(model, cluster, replace(PLAN, precision="fp32"), engine=get_engine())
    assert bf16.time.compute_s < tf32.time.compute_s < fp32.time.compute_s
    # GEMM-bound: tf32 at half of bf16's peak (same curve) costs at most twice bf16's compute, and more than 1.5x
    assert 1.5 < tf32.time.compute_s / bf16.time.compute_s <= 2.0 + 1e-9
    assert fp32.peak_flops_per_gpu == 19.5e12 and tf32.peak_flops_per_gpu == 156e12


@pytest.mark.parametrize("cluster", ["dgx1-v100", "dgx1-p100", "aws-p2-8xlarge"])
def test_tf32_is_refused_without_a_tf32_rate(cluster: str) -> None:
    with pytest.raises(ConfigError, match="precision=tf32 is not supported by .*use fp32"):
        estimate(get_model("llama3-8b"), get_cluster(cluster), replace(PLAN, precision="tf32"), engine=get_engine())


@pytest.mark.parametrize("cluster", ["dgx-a100-ib", "dgx-h100-ib"])
def test_default_search_does_not_try_full_precision(cluster: str) -> None:
    """bf16 dominates fp32 and tf32 on time and memory for transformers: the planner tries them only when asked."""
    from plait.search.space import default_space

    space = default_space(get_model("llama3-8b"), get_cluster(cluster), 8, (8,))
    assert set(space.precisions) <= {"bf16", "fp8"}
    asked = default_space(get_model("llama3-8b"), get_cluster(cluster), 8, (8,), precisions=("tf32",))
    assert asked.precisions == ("tf32",)


def test_the_runtime_keeps_full_precision_plans_out_of_autocast() -> None:
    """plait run: no bf16 autocast for fp32/tf32 plans; TF32 matmuls on only for tf32 (PyTorch's switches)."""
    torch = pytest.importorskip("torch")
    from plait.run.train import autocast

    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        for precision in ("tf32", "fp32"):
            with autocast(replace(PLAN, precision=precision), False, "cpu"):
                assert not torch.is_autocast_enabled("cpu")
            assert torch.backends.cuda.matmul.allow_tf32 == torch.backends.cudnn.allow_tf32 == (precision == "tf32")
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
