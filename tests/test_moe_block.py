"""Device work of a Megatron-Core MoE block beyond its GEMMs and charged bytes (plait.cost.moe_block)."""

from __future__ import annotations

import pytest

from plait.cost.moe_block import fp8_padding_bytes, moe_floor_s
from plait.cost.setup import Setup
from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.plan.plan import Plan
from plait.workload.catalog import get_model


def _setup(engine: str = "megatron-core", **plan: object) -> Setup:
    """Qwen3-30B-A3B (128 experts, top-8) on one DGX H100, 4,096-token sequences."""
    knobs = {"dp_replicate": 8, "ep": 8, "micro_batch": 1, "global_batch": 8, **plan}
    return Setup(
        model=get_model("qwen3-30b-a3b"),
        cluster=get_cluster("dgx-h100-ib"),
        plan=Plan(**knobs).with_seq_len(4096),
        framework=get_engine(engine).framework,
    )


def test_the_fixed_kernels_that_move_no_tokens_cost_one_floor_each_by_hand() -> None:
    """bf16, EP8 (16 local experts): Megatron-Core's 60 fixed MoE kernels, 30 per pass, less the five that move the
    tokens (permute, regroup by local expert, activation, regroup back, un-permute), 25 kernels at the H100's
    kernel floor each way. With one GPU per expert group (EP1, 128 local experts, no all-to-all) nothing is regrouped:
    27 kernels. No fp8: no quantization kernels."""
    setup = _setup()
    floor_s = setup.cluster.accelerator.efficiency.kernel_launch_us.value * 1e-6
    assert moe_floor_s(setup) == pytest.approx((25 * floor_s, 25 * floor_s))
    assert moe_floor_s(_setup(ep=1)) == pytest.approx((27 * floor_s, 27 * floor_s))


def test_per_expert_quantization_floors_fade_to_the_scale_kernel_as_the_experts_tokens_grow() -> None:
    """fp8 on Hopper, current scaling stated (amax, scale and cast kernels per quantized tensor): at micro-batch 1 some of
    each local expert's kernels are shorter than the floor; at a micro-batch of 64 the amax and cast kernels are
    byte-bound and only the scale kernel, which moves one value, runs at the floor: 16 local experts x 4 tensors
    (two inputs forward, two output gradients backward) x 1 kernel beyond the bf16 block, half each way. MXFP8 on
    the same large tensors (one kernel, byte-bound) adds nothing."""
    bf16 = moe_floor_s(_setup())
    floor_s = _setup().cluster.accelerator.efficiency.kernel_launch_us.value * 1e-6
    current = "megatron-bridge@25.11[fp8_recipe=current]"
    small = moe_floor_s(_setup(current, precision="fp8"))
    large = moe_floor_s(_setup(current, precision="fp8", micro_batch=64, global_batch=512))
    assert small[0] - bf16[0] > 16 * 2 * floor_s and small[1] - bf16[1] > 16 * 2 * floor_s
    assert large == pytest.approx((bf16[0] + 16 * 2 * floor_s, bf16[1] + 16 * 2 * floor_s))
    mx = moe_floor_s(
        _setup("megatron-bridge@25.11[fp8_recipe=mxfp8]", precision="fp8", micro_batch=64, global_batch=512)
    )
    assert mx == pytest.approx(bf16)


def test_an_engine_without_counted_moe_kernels_adds_nothing() -> None:
    assert moe_floor_s(_setup("torchtitan")) == (0.0, 0.0)


def test_fp8_experts_copy_every_routed_token_in_and_out_unless_the_dispatcher_pads() -> None:
    """fp8 Qwen3-30B-A3B at micro-batch 1: 4,096 tokens x top-8 = 32,768 routed tokens of hidden 2,048 in bf16, two
    copies (pad in, unpad out) each read and written: 4 x 2 x 32,768 x 2,048 bytes a pass. None in bf16, none where
    HybridEP pads as it permutes."""
    assert fp8_padding_bytes(_setup("megatron-bridge@25.11", precision="fp8")) == 4 * 2 * 32768 * 2048
    assert fp8_padding_bytes(_setup("megatron-bridge@25.11")) == 0.0
    assert fp8_padding_bytes(_setup("megatron-bridge@25.11[moe_dispatcher=hybridep]", precision="fp8")) == 0.0
