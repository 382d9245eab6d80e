"""Each VAE decoder's ResNet block is charged what its forward code moves besides its convolutions
(``block_bytes`` of components.toml): the kernels diffusers 0.32.0's block classes dispatch, counted by
benchmarks/vae_block_bytes.py on the meta device."""

from __future__ import annotations

import pytest

from plait.workloads.dit.components import vae_decoder
from tests.conftest import load_benchmark

BENCH = load_benchmark("vae_block_bytes")

OFFICIAL_HUNYUAN_DIVISION = 4.0
"""HunyuanVideo's rows run the official repository's ResnetBlockCausal3D, which ends in ``(input_tensor +
hidden_states) / self.output_scale_factor`` (Tencent-Hunyuan/HunyuanVideo@fa14b00
hyvideo/vae/unet_causal_3d_blocks.py): one more bf16 read and write than diffusers' block."""


def test_each_vae_block_is_charged_the_bytes_its_kernels_move() -> None:
    counted = BENCH.block_bytes()
    assert set(counted) == {"flux", "dc-ae-f32c32", "cogvideox", "hunyuan-video", "mochi"}
    for name, (total, parts) in counted.items():
        expected = total + (OFFICIAL_HUNYUAN_DIVISION if name == "hunyuan-video" else 0.0)
        assert vae_decoder(name).block_bytes.value == pytest.approx(expected, abs=0.05), (name, parts)


def test_dc_aes_efficientvit_levels_are_charged_their_own_blocks_bytes() -> None:
    """DC-AE's three deepest levels run EfficientViT blocks: their kernels outside the convolutions and matrix
    products (which the ResNet stand-in's GEMMs cost) are counted the same way, far above a ResBlock's."""
    total, parts = BENCH.deep_block_bytes()
    vae = vae_decoder("dc-ae-f32c32")
    assert vae.deep_levels == 3 and vae.deep_block_bytes is not None
    assert vae.deep_block_bytes.value == pytest.approx(total, abs=0.05), parts
    assert "mm.default" not in parts and "convolution.default" not in parts and total > 5 * vae.block_bytes.value


def test_the_counted_kernels_are_those_the_forward_code_reads_as() -> None:
    """Hand counts from the forward code: DC-AE's ResBlock normalises with diffusers' Python RMSNorm (bf16 -> fp32
    2 + 4 and back 4 + 2, the square 4 + 4 and the mean's read 4), AutoencoderKL's with two fused GroupNorms (each
    reads its input twice on CUDA and writes once, 6)."""
    counted = BENCH.block_bytes()
    _, dc_parts = counted["dc-ae-f32c32"]
    _, kl_parts = counted["flux"]
    assert dc_parts["_to_copy.default"] == pytest.approx(12.0, abs=0.05)
    assert dc_parts["pow.Tensor_Scalar"] == pytest.approx(8.0, abs=0.05)
    assert dc_parts["mean.dim"] == pytest.approx(4.0, abs=0.05)
    assert kl_parts["native_group_norm.default"] == pytest.approx(12.0, abs=0.05)
