"""Bytes a VAE decoder's ResNet block moves outside its convolutions, per value of its output, counted op by op.

Run: python benchmarks/vae_block_bytes.py   (diffusers 0.32.0 from the test extra, the release current when the Sana
and ConsisID tables were measured; torch from plait's environment)

Each block is the class diffusers' decoder builds, with the decoder's arguments (GroupNorm of 32 groups and SiLU for
the AutoencoderKL, HunyuanVideo and Mochi blocks; the spatially conditioned norm of the 16-channel latent and the
"first" causal padding for CogVideoX's; RMSNorm and SiLU for DC-AE's ``ResBlock``), run once in bf16 on the meta
device (shapes only, no arithmetic) under ``torch.no_grad`` on a ``128 x 256 x 256`` activation (video: ``x 8``
frames, what CogVideoX's decoder holds at full size per batch of two latent frames; the causal paddings' copies and
CogVideoX's two cached frames are shares of the frames decoded together). Every ATen op that runs a kernel (views
launch none) is charged the bytes of its tensor arguments and results, except the block's two convolutions, whose
operands the GEMM cost already carries (``plait.workloads.dit.components.vae_decode_flops_and_bytes``); a
convolution of one tap (CogVideoX's spatial norm projecting the latent) is not in that GEMM list, so its output is
charged. ``native_group_norm`` is charged one more read of its input, as PyTorch's CUDA group norm reads it twice
(``RowwiseMomentsCUDAKernel``, then the normalisation's elementwise kernel: aten/src/ATen/native/cuda/
group_norm_kernel.cu); ``_unsafe_view`` (``matmul`` folding and unfolding batch dimensions) aliases its input and
launches nothing. The total over the block's output values is what each ``[vae.*]`` entry of
``plait/workloads/dit/data/components.toml`` holds as ``block_bytes`` (HunyuanVideo's rows run the official
repository's block, which divides by ``output_scale_factor`` once more: 4 bytes).

DC-AE's three deepest levels run ``EfficientViTBlock`` (multi-scale linear attention, then a GLUMBConv: the
``decoder_block_types`` of dc-ae-f32c32-sana-1.0, diffusers' scripts/convert_dc_ae_to_diffusers.py), which plait's
decoder costs as a ResNet block's two convolutions of the same width; the FLOPs of its one-tap and depthwise
convolutions and of its attention's matrix products are that stand-in's, so none of them is charged here: what is
left, its ``deep_block_bytes``, is the casts, pads, activations, norms and copies around them, counted on a
``512 x 128 x 128`` activation. The per-op breakdown is printed beside each sum so each figure can be checked
against the forward code.
"""

from __future__ import annotations

import collections
import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

CHANNELS, SIDE, FRAMES = 128, 256, 8
EXTRA_INPUT_READS = {"aten.native_group_norm.default": 1}
"""Reads of the first input a CUDA kernel makes beyond the op's one (group_norm_kernel.cu: statistics, then apply)."""


def _bytes(tensors: object) -> int:
    return sum(t.numel() * t.element_size() for t in tree_leaves(tensors) if isinstance(t, torch.Tensor))


PRODUCTS = ("aten.mm.default", "aten.bmm.default")
"""Matrix products: an EfficientViT block's FLOPs, costed by its GEMM stand-in (module docstring)."""


class _CountBytes(TorchDispatchMode):
    """Bytes of tensor arguments and results of every kernel-launching op but the multi-tap convolutions (with
    ``products_costed``: every convolution and matrix product)."""

    def __init__(self, products_costed: bool = False) -> None:
        super().__init__()
        self.by_op: collections.Counter[str] = collections.Counter()
        self.products_costed = products_costed

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        name = str(func)
        if func.is_view or name == "aten._unsafe_view.default":
            return out
        if self.products_costed and name in PRODUCTS:
            return out
        if "convolution" in name:
            if not self.products_costed and math.prod(args[1].shape[2:]) == 1:  # one tap: not among the GEMMs
                self.by_op[name] += _bytes(out)
            return out
        first = next((t for t in tree_leaves((args, kwargs or {})) if isinstance(t, torch.Tensor)), None)
        moved = _bytes((args, kwargs or {})) + _bytes(out)
        if first is not None:
            moved += EXTRA_INPUT_READS.get(name, 0) * first.numel() * first.element_size()
        self.by_op[name] += moved
        return out


def _blocks() -> dict[str, tuple[torch.nn.Module, tuple[int, ...], dict[str, torch.Tensor]]]:
    """Per ``[vae.*]`` name of components.toml: the block, its input shape and its extra inputs."""
    from diffusers.models.autoencoders.autoencoder_dc import ResBlock
    from diffusers.models.autoencoders.autoencoder_kl_cogvideox import CogVideoXResnetBlock3D
    from diffusers.models.autoencoders.autoencoder_kl_hunyuan_video import HunyuanVideoResnetBlockCausal3D
    from diffusers.models.autoencoders.autoencoder_kl_mochi import MochiResnetBlock3D
    from diffusers.models.resnet import ResnetBlock2D

    c, s, f = CHANNELS, SIDE, FRAMES
    latent = torch.empty(1, 16, f // 4, s // 8, s // 8, dtype=torch.bfloat16, device="meta")
    return {
        # vae.py Decoder -> UpDecoderBlock2D: ResnetBlock2D(temb_channels=None, groups=32, eps=1e-6, silu)
        "flux": (ResnetBlock2D(in_channels=c, out_channels=c, temb_channels=None, groups=32, eps=1e-6),
                 (1, c, s, s), {"temb": None}),
        # autoencoder_dc.py Decoder: get_block("ResBlock", ..., norm_type="rms_norm", act_fn="silu")
        "dc-ae-f32c32": (ResBlock(c, c, norm_type="rms_norm", act_fn="silu"), (1, c, s, s), {}),
        # autoencoder_kl_cogvideox.py CogVideoXUpBlock3D: temb_channels 0, spatial_norm_dim = latent channels (16)
        "cogvideox": (CogVideoXResnetBlock3D(in_channels=c, out_channels=c, temb_channels=0, groups=32, eps=1e-6,
                                             non_linearity="swish", spatial_norm_dim=16, pad_mode="first"),
                      (1, c, f, s, s), {"zq": latent}),
        "hunyuan-video": (HunyuanVideoResnetBlockCausal3D(in_channels=c, out_channels=c), (1, c, f, s, s), {}),
        "mochi": (MochiResnetBlock3D(in_channels=c), (1, c, f, s, s), {}),
    }


def _count(block: torch.nn.Module, shape: tuple[int, ...], extra: dict[str, torch.Tensor],
           products_costed: bool = False) -> tuple[float, dict[str, float]]:
    block = block.to(device="meta", dtype=torch.bfloat16).eval()
    x = torch.empty(*shape, dtype=torch.bfloat16, device="meta")
    counter = _CountBytes(products_costed)
    with torch.no_grad(), counter:
        block(x, **extra)
    values = x.numel()
    parts = {op.removeprefix("aten."): moved / values for op, moved in counter.by_op.items()}
    return sum(parts.values()), parts


def block_bytes() -> dict[str, tuple[float, dict[str, float]]]:
    """Per VAE: bytes per output value of one ResNet block outside its convolutions, and the same split by op."""
    return {name: _count(*entry) for name, entry in _blocks().items()}


def deep_block_bytes() -> tuple[float, dict[str, float]]:
    """DC-AE's EfficientViT block (as its decoder builds it: 32-channel heads, multi-scale 5, RMSNorm): bytes per
    output value outside its convolutions and matrix products, and the same split by op (module docstring)."""
    from diffusers.models.autoencoders.autoencoder_dc import EfficientViTBlock

    block = EfficientViTBlock(512, attention_head_dim=32, qkv_multiscales=(5,), norm_type="rms_norm")
    return _count(block, (1, 512, 128, 128), {}, products_costed=True)


def main() -> None:
    rows = {**block_bytes(), "dc-ae-f32c32, EfficientViT levels": deep_block_bytes()}
    for name, (total, parts) in rows.items():
        split = ", ".join(f"{op} {b:.1f}" for op, b in parts.items())
        print(f"{name}: {total:.1f} bytes per output value ({split})")


if __name__ == "__main__":
    main()
