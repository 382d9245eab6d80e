"""The parts of a diffusion pipeline besides its denoiser: text encoders and VAE decoders, described from their
published configs (``plait/workloads/dit/data/components.toml``, a source per entry), and their time on one GPU.

- A text encoder runs once per prompt (twice with classifier-free guidance: diffusers' pipelines encode the negative
  prompt too, in one batch). Per layer the GEMMs of its Q, K, V and output projections and its MLP (Vaswani et al.,
  NeurIPS 2017, Sec. 3; gated MLPs: Shazeer, arXiv 2002.05202) at the device's GEMM curve, and attention over the
  prompt at its attention curve.
- A VAE decoder runs once per image or video, after the last step, on one GPU (xDiT and ParaAttention decode on one
  rank unless told to parallelise the VAE). Its convolutions are implicit GEMMs (Chetlur et al., cuDNN, arXiv
  1410.0759, Sec. 3.1): a ``k``-tap convolution from ``C`` to ``C'`` channels over ``V`` output pixels (voxels) is a
  ``V x C' x kC`` GEMM, costed at the device's GEMM curve; each ResNet block is two such convolutions (He et al.,
  CVPR 2016) plus the kernels around them (norms, activations, the causal convolutions' padding copies, the residual
  sum), ``block_bytes`` per value of its ``V x C`` output at the memory bandwidth, counted op by op in the decoder's
  own forward code (``benchmarks/vae_block_bytes.py``); the 2-D mid block's single-head attention over the latent's
  pixels (Rombach et al., CVPR 2022, App. G) at the attention curve.
"""

from __future__ import annotations

import functools
import math
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Literal

from plait.cost.compute import attention_flops_per_s, gemm_time_s, memory_bytes_per_s
from plait.cost.flops import Gemm
from plait.errors import ConfigError
from plait.hardware.accelerator import Accelerator
from plait.hardware.figure import Figure
from plait.schema import build

@dataclass(frozen=True, kw_only=True)
class TextEncoder:
    """A transformer text encoder (components.toml)."""

    name: str
    """What its model card calls it."""
    layers: int
    """Transformer layers."""
    hidden: int
    """Hidden width."""
    heads_dim: int
    """Query heads x head width (the attention's inner width)."""
    kv_dim: int
    """Key-value heads x head width (grouped-query attention shares them)."""
    ffn: int
    """The MLP's inner width."""
    glu: bool
    """A gated MLP: the input projection doubled."""
    max_tokens: int
    """The longest prompt it encodes (longer ones are truncated)."""
    source: str
    """Where the shape comes from."""


@dataclass(frozen=True, kw_only=True)
class VaeDecoder:
    """A convolutional VAE decoder (components.toml)."""

    name: str
    """What its model card calls it."""
    latent_channels: int
    """Channels of the latent it decodes."""
    block_out_channels: tuple[int, ...]
    """Widths, full resolution first (the encoder's order)."""
    layers: tuple[int, ...]
    """ResNet blocks at each width of ``block_out_channels``."""
    spatial_up: tuple[int, ...]
    """Upsampling per side after each level but the last, decoding order (from the latent)."""
    temporal_up: tuple[int, ...]
    """Frame upsampling after each level but the last, decoding order."""
    kernel: tuple[int, ...]
    """Convolution taps per dimension: ``(3, 3)`` images, ``(3, 3, 3)`` video."""
    upsample: Literal["conv", "linear"]
    """``conv``: nearest upsampling then a ``kernel`` convolution at the new size; ``linear``: a pointwise projection
    to ``C' t s^2`` channels, then depth-to-space (Mochi)."""
    mid_resnets: int
    """ResNet blocks of the mid block at the latent's size."""
    mid_attention: bool
    """The mid block's single-head self-attention over the latent's pixels."""
    block_bytes: Figure
    """Bytes a ResNet block's kernels besides its convolutions read and write per value of its output."""
    deep_levels: int = 0
    """The deepest levels (the first decoded) whose blocks are of another kind, costed as a ResNet block's
    convolutions of the same width plus ``deep_block_bytes`` a value (DC-AE's EfficientViT blocks)."""
    deep_block_bytes: Figure | None = None
    """Bytes those blocks' kernels besides their convolutions and matrix products move per value of their output."""
    source: str
    """Where the shape comes from."""

    @property
    def downsample(self) -> int:
        return math.prod(self.spatial_up)


@functools.cache
def _tables() -> dict[str, dict[str, dict[str, object]]]:
    text = resources.files("plait.workloads.dit").joinpath("data/components.toml").read_text()
    return tomllib.loads(text)


def text_encoder(name: str) -> TextEncoder:
    """The catalog's text encoder ``name``."""
    table = _tables()["text_encoder"]
    if name not in table:
        raise ConfigError(f"text encoder {name!r} must be one of {', '.join(sorted(table))}")
    return build(TextEncoder, table[name], f"components.toml:text_encoder.{name}")


def vae_decoder(name: str) -> VaeDecoder:
    """The catalog's VAE decoder ``name``."""
    table = _tables()["vae"]
    if name not in table:
        raise ConfigError(f"vae {name!r} must be one of {', '.join(sorted(table))}")
    vae = build(VaeDecoder, table[name], f"components.toml:vae.{name}")
    levels = len(vae.block_out_channels)
    assert len(vae.layers) == levels and len(vae.spatial_up) == len(vae.temporal_up) == levels - 1, name
    assert 0 <= vae.deep_levels <= levels and (vae.deep_levels > 0) == (vae.deep_block_bytes is not None), name
    return vae


def text_encoder_s(encoder: TextEncoder, tokens: int, prompts: int, acc: Accelerator) -> float:
    """One batch of ``prompts`` prompts of ``tokens`` tokens through ``encoder`` (module docstring); never less than
    one prompt alone takes (the GEMM curve's efficiency rises with the row count faster than the work at these
    small shapes, which a batch cannot turn into a saving)."""
    alone = _text_encoder_s(encoder, tokens, 1, acc)
    return alone if prompts == 1 else max(alone, _text_encoder_s(encoder, tokens, prompts, acc))


def _text_encoder_s(encoder: TextEncoder, tokens: int, prompts: int, acc: Accelerator) -> float:
    m, h = tokens * prompts, encoder.hidden
    up = encoder.ffn * (2 if encoder.glu else 1)
    gemms = [Gemm(m, encoder.heads_dim, h), Gemm(m, 2 * encoder.kv_dim, h), Gemm(m, h, encoder.heads_dim),
             Gemm(m, up, h), Gemm(m, h, encoder.ffn)]
    per_layer = sum(gemm_time_s(g, acc, "bf16") for g in gemms)
    attention_flops = 4.0 * prompts * tokens * tokens * encoder.heads_dim  # QK^T and PV (Dao, arXiv 2205.14135)
    per_layer += attention_flops / attention_flops_per_s(acc, tokens)
    return encoder.layers * per_layer


def vae_decode_flops_and_bytes(vae: VaeDecoder, width: int, height: int, frames: int) -> tuple[list[Gemm], float]:
    """The decoder's convolutions as implicit GEMMs and its norm/activation traffic in bytes, decoding to
    ``width x height`` pixels and ``frames`` frames (module docstring)."""
    taps = math.prod(vae.kernel)
    video = len(vae.kernel) == 3
    ups = list(zip(vae.spatial_up, vae.temporal_up, strict=True)) + [(1, 1)]
    down, t_down = vae.downsample, math.prod(vae.temporal_up)
    side_w, side_h = width // down, height // down
    f = 1 + (frames - 1) // t_down if video else 1
    gemms: list[Gemm] = []
    traffic = 0.0
    widths = list(reversed(vae.block_out_channels))
    counts = list(reversed(vae.layers))
    c_in = vae.latent_channels
    for level, (c, n) in enumerate(zip(widths, counts, strict=True)):
        voxels = side_w * side_h * f
        if level == 0:
            gemms.append(Gemm(voxels, c, taps * c_in))  # conv_in
            gemms += [Gemm(voxels, c, taps * c)] * (2 * vae.mid_resnets)
            traffic += voxels * c * vae.block_bytes.value * vae.mid_resnets
            if vae.mid_attention:  # per frame: QK^T and PV over the latent's pixels, one head of width c
                pixels = side_w * side_h
                gemms += [Gemm(pixels, pixels, c, count=f), Gemm(pixels, c, pixels, count=f), Gemm(voxels, 4 * c, c)]
            c_in = c
        deep = vae.deep_block_bytes if level < vae.deep_levels else None
        for block in range(n):
            first = c_in if block == 0 else c
            gemms += [Gemm(voxels, c, taps * first), Gemm(voxels, c, taps * c)]
            if first != c:
                gemms.append(Gemm(voxels, c, first))  # 1x1 shortcut
            traffic += voxels * c * (deep or vae.block_bytes).value
        c_in = c
        s, t = ups[level]
        next_c = widths[level + 1] if level + 1 < len(widths) else c
        if level + 1 < len(widths):
            if vae.upsample == "linear":
                gemms.append(Gemm(voxels, next_c * t * s * s, c))
                c_in = next_c
            side_w, side_h = side_w * s, side_h * s
            f = min(frames, f * t) if video else 1
            if vae.upsample == "conv":
                gemms.append(Gemm(side_w * side_h * f, c, taps * c))
    gemms.append(Gemm(side_w * side_h * f, 3, taps * c_in))  # conv_out to RGB
    return gemms, traffic


def vae_decode_s(vae: VaeDecoder, width: int, height: int, frames: int, acc: Accelerator) -> float:
    """The decoder's time on one GPU (module docstring)."""
    gemms, traffic = vae_decode_flops_and_bytes(vae, width, height, frames)
    return sum(gemm_time_s(g, acc, "bf16") for g in gemms) + traffic / memory_bytes_per_s(acc)


def check_components(encoders: tuple[str, ...], vae: str, where: str) -> None:
    """Refuse names the catalog does not hold (one line)."""
    try:
        for name in encoders:
            text_encoder(name)
        if vae:
            vae_decoder(vae)
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from None
