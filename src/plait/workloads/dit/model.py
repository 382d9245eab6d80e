"""A diffusion transformer at inference: its blocks, the image's tokens and the denoising job.

Three block families, parameters per block from their papers' definitions (``H`` hidden, ``r`` MLP ratio):

- ``dit`` (Peebles & Xie, ICCV 2023, Sec. 3.2, adaLN-Zero): self-attention ``4 H^2``, MLP ``2 r H^2`` and the
  block's own modulation ``Linear(H, 6H)``, ``6 H^2``; the modulation runs once per image, not per token.
- ``pixart`` (Chen et al., PixArt-alpha, ICLR 2024, Sec. 2.3): self-attention ``4 H^2``, cross-attention to the text
  tokens ``4 H^2``, MLP ``2 r H^2``; adaLN-single is shared by all blocks (a ``6 H`` table per block).
- ``mmdit`` (Esser et al., SD3, ICML 2024, Sec. 3; Flux.1's double-stream blocks): image and text streams each with
  their own attention projections ``4 H^2``, MLP ``2 r H^2`` and modulation ``6 H^2``, attending jointly over image
  and text tokens; ``single_layers`` more single-stream blocks (Flux.1: one ``Linear(H, 3H + rH)`` for QKV and the
  MLP's input, one ``Linear(H + rH, H)``, modulation ``3 H^2``: ``(7 + 2r) H^2``) over the joined sequence.
- ``joint`` (CogVideoX's expert transformer: Yang et al., arXiv 2408.06072, Sec. 2.2; ConsisID builds on it): text
  and video tokens concatenated into one sequence through one set of weights (attention ``4 H^2``, MLP ``2 r H^2``),
  full 3-D attention over frames x patches and the text.
- ``linear`` (Sana: Xie et al., arXiv 2410.10629, Sec. 2.2): ReLU linear self-attention ``4 H^2`` (its cost linear in
  the tokens), cross-attention to the text ``4 H^2`` (``Q`` and output on the image tokens), a Mix-FFN (GLU input
  projection ``2 r H^2``, 3x3 depthwise convolution, output ``r H^2``).

``mlp``: ``plain`` (``Linear(H, rH)``, activation, ``Linear(rH, H)``: ``2 r H^2``), or an input projection doubled
and gated, ``3 r H^2`` for the MLP: ``swiglu`` (Mochi 1; diffusers ``FeedForward(activation_fn="swiglu")``) or
``glumbconv`` (Sana's Mix-FFN, diffusers ``GLUMBConv``: 1x1 convolutions with a 3x3 depthwise one between).

Video: ``frames`` of ``resolution x height`` pixels; a causal video VAE keeps the first frame and folds every
``vae_temporal`` after it into one latent frame, ``1 + (frames - 1) // vae_temporal`` latent frames (HunyuanVideo,
CogVideoX and Mochi VAEs: diffusers' ``AutoencoderKLHunyuanVideo``, ``AutoencoderKLCogVideoX``,
``AutoencoderKLMochi``), each of ``(resolution / vae_downsample / patch) x (height / vae_downsample / patch)`` tokens.

The image: ``resolution`` pixels a side, a VAE that downsamples by ``vae_downsample`` into ``latent_channels``,
patches of ``patch`` latent pixels a side: ``(resolution / vae_downsample / patch)^2`` tokens.

A TOML file describes it (``examples/dit-xl-2-1024px.toml``)::

    name = "..."
    [dit]
    kind = "dit"            # dit | pixart | mmdit
    hidden = 1152
    layers = 28
    heads = 16
    mlp_ratio = 4.0
    patch = 2
    latent_channels = 4
    vae_downsample = 8
    text_tokens = 0         # cross- or joint-attention text tokens (pixart, mmdit, joint, linear)
    single_layers = 0       # mmdit: single-stream blocks after the double-stream ones
    mlp = "plain"           # plain | swiglu | glumbconv
    vae_temporal = 1        # video: frames per latent frame after the first
    text_encoders = []      # names in plait/workloads/dit/data/components.toml
    vae = ""                # a name in the same file
    eager_kernels = 0       # kernels one block launches in eager PyTorch (host time; 0: not modelled)
    eager_kernels_single = 0
    step_extra_kernels = 0  # eager kernels per step outside the blocks (pipeline, scheduler, embeddings, ...)
    side_attention_every = 0  # a cross-attention to conditioning tokens after every this many blocks (ConsisID: 2)
    side_attention_width = 0  # its inner width
    rotary_fp32 = "none"    # image | all: tokens whose Q, K an eager fp32 rotary embedding rotates
    [job]
    resolution = 1024       # width in pixels
    height = 0              # 0: square
    frames = 1              # video frames
    steps = 50
    batch = 1
    cfg = true              # classifier-free guidance: a conditional and an unconditional pass per step
    compiled = false        # torch.compile
    cache_skip = 0.0        # step caching: fraction of steps that skip all blocks but the first
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from plait.errors import ConfigError
from plait.schema import build, check_keys, table, value
from plait.workload.files import read_toml
from plait.workloads.dit.components import check_components

DitKind = Literal["dit", "pixart", "mmdit", "joint", "linear"]
KINDS: tuple[DitKind, ...] = ("dit", "pixart", "mmdit", "joint", "linear")
JOINED: tuple[DitKind, ...] = ("mmdit", "joint")
"""Kinds whose attention runs over the image and text tokens joined."""
ACT_BYTES = 2
"""fp16/bf16 weights and activations, as xDiT and diffusers run these models."""


@dataclass(frozen=True, kw_only=True)
class DitSpec:
    """A diffusion transformer (module docstring)."""

    name: str
    """What tables call it (a file's top-level ``name``, else the file's stem)."""
    kind: DitKind = "dit"
    """The block family (module docstring)."""
    hidden: int
    """Hidden width ``H``."""
    layers: int
    """Blocks (mmdit: double-stream blocks)."""
    heads: int
    """Attention heads; must divide ``hidden``."""
    mlp_ratio: float = 4.0
    """The MLP's width over ``hidden`` (``r``)."""
    patch: int = 2
    """Latent pixels per patch side."""
    latent_channels: int = 4
    """Channels of the VAE's latent."""
    vae_downsample: int = 8
    """Image pixels per latent pixel, per side."""
    text_tokens: int = 0
    """Text tokens attended to (pixart: cross-attention; mmdit: joint attention); 0 for a class-conditioned dit."""
    single_layers: int = 0
    """mmdit: single-stream blocks after the double-stream ones."""
    hf_model: str = ""
    """The Hugging Face id of the published weights (what an engine loads); empty for a shape only."""
    mlp: Literal["plain", "swiglu", "glumbconv"] = "plain"
    """The MLP: plain, or with a doubled and gated input projection (module docstring)."""
    vae_temporal: int = 1
    """Video frames per latent frame after the first (1: an image model)."""
    text_encoders: tuple[str, ...] = ()
    """The pipeline's text encoders, names in ``plait/workloads/dit/data/components.toml``; run once per prompt."""
    vae: str = ""
    """The pipeline's VAE, a name in ``plait/workloads/dit/data/components.toml``; its decoder runs once."""
    eager_kernels: int = 0
    """CUDA kernels one block (mmdit: one double-stream block) launches per pass in eager PyTorch, counted from the
    implementation's forward code (the model file says which); 0: host time not modelled."""
    eager_kernels_single: int = 0
    """mmdit: the same for one single-stream block."""
    step_extra_kernels: int = 0
    """Kernels one eager denoising step launches outside the blocks and side attentions, whatever the plan: the
    pipeline's loop and scheduler, the transformer's embeddings and final layer, and modules run once per forward on
    a few tokens (ConsisID's Local Facial Extractor), counted from the code the model file names; 0: not counted.
    Host time only (their tensors are a latent or a few tokens); not counted in compiled runs."""
    side_attention_every: int = 0
    """A cross-attention from the image (video) tokens to a few conditioning tokens, added to the residual after
    every this many blocks (ConsisID's face cross-attention: diffusers ``ConsisIDTransformer3DModel``,
    ``perceiver_cross_attention`` after block ``i`` when ``i % cross_attn_interval == 0``); 0: none."""
    side_attention_width: int = 0
    """Its inner width (heads x head width): Q from and output back to ``hidden``, K and V from the conditioning
    tokens (ConsisID: 16 x 128 = 2048, K and V from 2048-wide face tokens)."""
    rotary_fp32: Literal["none", "image", "all"] = "none"
    """The eager rotary embedding casts Q and K to fp32 (diffusers' ``apply_rotary_emb``) on the image (video)
    tokens only (CogVideoX, ConsisID) or on all the attended tokens (FLUX.1); traffic in
    :mod:`plait.workloads.dit.eager_traffic`."""

    def token_params(self) -> float:
        """Parameters every token passes through (linear maps applied per token), all blocks."""
        h2, r = self.hidden**2, self.mlp_ratio
        if self.kind == "dit":
            return self.layers * (4 + 2 * r) * h2
        m = self.mlp_factor
        if self.kind == "pixart":
            return self.layers * (4 + 2 + 2 * r) * h2  # cross-attention's Q and O act on image tokens
        if self.kind == "linear":
            return self.layers * (4 + 2 + m * r) * h2
        if self.kind == "joint":
            return self.layers * (4 + m * r) * h2
        return self.layers * (4 + 2 * r) * h2 + self.single_layers * (4 + 2 * r) * h2

    def params(self) -> float:
        """All blocks' parameters and the side cross-attentions' (module docstring; embedders and the final layer are
        left out, < 1%)."""
        return self._block_params() + self.side_attention_params()

    def _block_params(self) -> float:
        h2, r = self.hidden**2, self.mlp_ratio
        if self.kind == "dit":
            return self.layers * (4 + 2 * r + 6) * h2
        m = self.mlp_factor
        if self.kind == "pixart":
            return self.layers * (8 + 2 * r) * h2
        if self.kind == "linear":
            return self.layers * (8 + m * r) * h2
        if self.kind == "joint":
            return self.layers * (4 + m * r) * h2
        return self.layers * 2 * (4 + m * r + 6) * h2 + self.single_layers * (7 + 2 * r) * h2

    @property
    def side_attention_calls(self) -> int:
        """Side cross-attentions per pass: blocks ``0, every, 2 every, ...`` (diffusers sets ``num_layers //
        cross_attn_interval`` of them)."""
        return self.layers // self.side_attention_every if self.side_attention_every else 0

    def side_attention_params(self) -> float:
        """Q and output projections (``2 H w``) and the K, V projection of ``w``-wide conditioning tokens
        (``2 w^2``, diffusers ``PerceiverCrossAttention.to_kv``), per call, all calls."""
        w = self.side_attention_width
        return self.side_attention_calls * (2 * self.hidden * w + 2 * w * w)

    @property
    def mlp_factor(self) -> int:
        """The MLP's weights in units of ``r H^2``: 2, or 3 with a gated (GLU) input projection."""
        return 2 if self.mlp == "plain" else 3

    @property
    def attention_layers(self) -> int:
        return self.layers + (self.single_layers if self.kind == "mmdit" else 0)


@dataclass(frozen=True, kw_only=True)
class DitJob:
    """What is generated: ``batch`` images of ``resolution`` pixels a side in ``steps`` denoising steps."""

    resolution: int = 1024
    """Image pixels a side."""
    steps: int = 50
    """Denoising steps."""
    batch: int = 1
    """Images generated at once."""
    cfg: bool = True
    """Classifier-free guidance: a conditional and an unconditional pass per step."""
    height: int = 0
    """Image pixels down a side when it differs from ``resolution`` (the width); 0: square."""
    frames: int = 1
    """Video frames (1: an image)."""
    compiled: bool = False
    """The denoiser runs under ``torch.compile`` (fused pointwise kernels, fewer launches); False: eager PyTorch."""
    cache_skip: float = 0.0
    """Step caching (first-block cache / TeaCache): the fraction of steps whose blocks after the first are skipped
    (:mod:`plait.workloads.dit.pipeline`); 0: every step runs every block."""
    vae_tile_px: int = 0
    """The VAE decodes in overlapping tiles of this many pixels a side (diffusers' ``enable_vae_tiling``:
    ``tile_sample_min_height``/``_width``; :mod:`plait.workloads.dit.vae_tiling`); 0: the whole latent at once."""
    vae_tile_stride_px: int = 0
    """Pixels between the starts of neighbouring tiles (``tile_sample_stride_*``); ``<= vae_tile_px``."""
    vae_tile_frames: int = 0
    """A video's VAE also decodes in overlapping runs of this many frames (HunyuanVideo's ``temporal_tiled_decode``:
    ``sample_tsize``; :mod:`plait.workloads.dit.vae_tiling`), each one latent frame longer; 0: every frame at once."""
    vae_tile_stride_frames: int = 0
    """Frames between the starts of neighbouring runs; ``<= vae_tile_frames``."""
    output: Literal["pil", "tensor"] = "pil"
    """What the pipeline call hands back: ``pil``, PIL images (diffusers' default ``output_type``), converted on the
    host (:func:`plait.workloads.dit.pipeline.postprocess_s`); ``tensor``, the decoded tensor or array as it is."""

    @property
    def pixels_high(self) -> int:
        return self.height or self.resolution

    def latent_frames(self, spec: DitSpec) -> int:
        return 1 + (self.frames - 1) // spec.vae_temporal

    def image_tokens(self, spec: DitSpec) -> int:
        side = spec.vae_downsample * spec.patch
        return self.latent_frames(spec) * (self.resolution // side) * (self.pixels_high // side)

    @property
    def passes(self) -> int:
        """Model evaluations per step: two per image with classifier-free guidance."""
        return self.batch * (2 if self.cfg else 1)


def is_dit_data(data: dict[str, Any]) -> bool:
    return "dit" in data


def read_dit(path: Path) -> tuple[DitSpec, DitJob]:
    """The model and job a TOML file describes, through the strict schema (:func:`plait.schema.build`: unknown keys,
    missing keys and wrong types are errors naming the key); one-line errors name the value and the rule."""
    data = read_toml(path)
    where = str(path)
    check_keys(data, ("dit", "job", "name"), where)
    if "dit" not in data:
        raise ConfigError(f"{where}: a DiT needs 'dit'")
    blocks = table(data["dit"], f"{where}: [dit]")
    if "name" in blocks:
        raise ConfigError(f"{where}: [dit]: unknown key 'name' (the model's name is a top-level key)")
    name = value(data.get("name", path.stem), str, f"{where}: name")
    spec = build(DitSpec, {"name": name, **blocks}, f"{where}: [dit]")
    job = build(DitJob, table(data.get("job", {}), f"{where}: [job]"), f"{where}: [job]")
    check_dit(spec, job, where)
    check_components(spec.text_encoders, spec.vae, where)
    return spec, job


def _check_tiles(job: DitJob, unit: str, step_name: str, step: int, untiled: str, where: str) -> None:
    """Refuse a VAE tiling (``vae_tile_<unit>`` every ``vae_tile_stride_<unit>``) whose sizes are not multiples of
    ``step`` with ``0 < stride <= tile``, or both 0 (one line)."""
    tile, stride = getattr(job, f"vae_tile_{unit}"), getattr(job, f"vae_tile_stride_{unit}")
    if tile and not 0 < stride <= tile or tile < 0 or tile % step or stride % step:
        raise ConfigError(f"{where}: vae_tile_{unit}={tile} and vae_tile_stride_{unit}={stride} must be multiples of "
                          f"{step_name}={step} with 0 < stride <= tile (or both 0: {untiled})")


def check_dit(spec: DitSpec, job: DitJob, where: str) -> None:
    """Refuse what no model or job can be."""
    if spec.kind not in KINDS:
        raise ConfigError(f"{where}: kind={spec.kind!r} must be one of {', '.join(KINDS)}")
    for name in ("hidden", "layers", "heads", "patch", "latent_channels", "vae_downsample"):
        if getattr(spec, name) < 1:
            raise ConfigError(f"{where}: {name}={getattr(spec, name)} must be >= 1")
    if spec.hidden % spec.heads:
        raise ConfigError(f"{where}: heads={spec.heads} must divide hidden={spec.hidden}")
    if not (math.isfinite(spec.mlp_ratio) and spec.mlp_ratio > 0):
        raise ConfigError(f"{where}: mlp_ratio={spec.mlp_ratio} must be > 0")
    if spec.kind == "dit" and spec.text_tokens:
        raise ConfigError(f"{where}: text_tokens={spec.text_tokens}: a class-conditioned dit attends to no text")
    if spec.kind != "dit" and spec.text_tokens < 1:
        raise ConfigError(f"{where}: a {spec.kind} model needs text_tokens >= 1")
    for name in ("resolution", "pixels_high"):
        if getattr(job, name) % (spec.vae_downsample * spec.patch) or getattr(job, name) < 1:
            raise ConfigError(f"{where}: {name.replace('pixels_high', 'height')}={getattr(job, name)} must be a "
                              f"positive multiple of vae_downsample x patch = {spec.vae_downsample * spec.patch}")
    if job.steps < 1 or job.batch < 1 or job.frames < 1 or spec.vae_temporal < 1:
        raise ConfigError(f"{where}: steps={job.steps}, batch={job.batch}, frames={job.frames} and "
                          f"vae_temporal={spec.vae_temporal} must be >= 1")
    if not 0.0 <= job.cache_skip < 1.0:
        raise ConfigError(f"{where}: cache_skip={job.cache_skip} must be in [0, 1)")
    _check_tiles(job, "px", "vae_downsample", spec.vae_downsample, "untiled", where)
    _check_tiles(job, "frames", "vae_temporal", spec.vae_temporal, "every frame at once", where)
    if spec.side_attention_every < 0 or spec.side_attention_width < 0 or (
            spec.side_attention_every > 0) != (spec.side_attention_width > 0):
        raise ConfigError(f"{where}: side_attention_every={spec.side_attention_every} and side_attention_width="
                          f"{spec.side_attention_width} must both be 0 or both be >= 1")
    if min(spec.eager_kernels, spec.eager_kernels_single, spec.step_extra_kernels) < 0:
        raise ConfigError(f"{where}: eager_kernels={spec.eager_kernels}, eager_kernels_single="
                          f"{spec.eager_kernels_single} and step_extra_kernels={spec.step_extra_kernels} must be >= 0")
