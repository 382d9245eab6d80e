"""Transformer Engine fp8 recipes: bytes and kernels beyond one fused cast (plait.cost.fp8_recipe), by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from plait.cost.flops import Gemm
from plait.cost.fp8_recipe import extra_bytes_per_element, quantize_extra_bytes
from plait.cost.host import fp8_quantize_kernels
from plait.cost.setup import Setup
from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.plan.plan import Plan
from plait.validate.runs import read_runs
from plait.workload.catalog import get_model


def _setup(cluster: str, engine: str, precision: str = "fp8") -> Setup:
    model = get_model("llama3-8b")
    plan = Plan(dp_replicate=8, global_batch=8, precision=precision).with_seq_len(model.seq_len)
    return Setup(model=model, cluster=get_cluster(cluster), plan=plan, framework=get_engine(engine).framework)


@pytest.mark.parametrize(("cluster", "recipe", "per_element", "kernels"), [
    ("b200-dgx", "current", 2.0, 3),  # amax read 2; Blackwell takes non-TN fp8 GEMMs: no transposed copy
    ("dgx-h100-ib", "current", 3.0, 3),  # amax read 2 + transposed copy 1 (Hopper fp8 GEMMs are TN only)
    ("b200-dgx", "mxfp8", 1.0625, 1),  # columnwise copy 1 + two E8M0 scales per 32 elements, 2/32
])
def test_stated_recipe_adds_its_bytes_and_kernels(cluster: str, recipe: str, per_element: float, kernels: int) -> None:
    setup = _setup(cluster, f"megatron-bridge@25.11[fp8_recipe={recipe}]")
    assert extra_bytes_per_element(setup) == pytest.approx(per_element)
    assert fp8_quantize_kernels(setup) == kernels
    gemm = Gemm(8, 16, 4, 2)  # inputs 8 x 4, output gradients 8 x 16, twice
    assert quantize_extra_bytes(setup, [gemm]) == pytest.approx((per_element * 64, per_element * 256))


def test_unstated_recipe_or_bf16_adds_nothing_and_keeps_the_accelerator_rule() -> None:
    assert extra_bytes_per_element(_setup("b200-dgx", "megatron-bridge@25.11")) == 0.0
    assert fp8_quantize_kernels(_setup("b200-dgx", "megatron-bridge@25.11")) == 1  # MXFP8 where an fp4 peak is
    assert fp8_quantize_kernels(_setup("dgx-h100-ib", "megatron-bridge@25.11")) == 3
    assert extra_bytes_per_element(_setup("b200-dgx", "megatron-bridge@25.11[fp8_recipe=current]", "bf16")) == 0.0


def test_megatron_bridge_rows_state_their_recipe_from_the_precision_they_quote() -> None:
    rows = {r.id: r for r in read_runs(Path("src/plait/validate/data/dev.csv")) if r.source == "mbridge_2511"}
    assert rows["mbridge2511_B200_LLAMA3_8B_8_FP8-CS"].run_engine == "megatron-bridge@25.11[fp8_recipe=current]"
    assert rows["mbridge2511_B200_Qwen3_30B_a3B_8_FP8-MX"].run_engine == "megatron-bridge@25.11[fp8_recipe=mxfp8]"
    assert rows["mbridge2511_B200_GPTOSS120B_64_BF16"].run_engine == "megatron-bridge@25.11"
    # and the dispatcher its performance recipe sets (HybridEP on GB200/GB300, Megatron-Bridge v0.2.0 configs)
    assert (rows["mbridge2511_GB200_Qwen3_30B_a3B_8_FP8-MX"].run_engine
            == "megatron-bridge@25.11[moe_dispatcher=hybridep,fp8_recipe=mxfp8]")
