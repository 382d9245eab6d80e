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
    text_tokens = 0         # cross- or joint-attention text tokens (pixart, mmdit)
    single_layers = 0       # mmdit: single-stream blocks after the double-stream ones
    [job]
    resolution = 1024
    steps = 50
    batch = 1
    cfg = true              # classifier-free guidance: a conditional and an unconditional pass per step
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from plait.errors import ConfigError

DitKind = Literal["dit", "pixart", "mmdit"]
KINDS: tuple[DitKind, ...] = ("dit", "pixart", "mmdit")
ACT_BYTES = 2
"""fp16/bf16 weights and activations, as xDiT and diffusers run these models."""


@dataclass(frozen=True, kw_only=True)
class DitSpec:
    """A diffusion transformer (module docstring)."""

    name: str
    kind: DitKind
    hidden: int
    layers: int
    heads: int
    mlp_ratio: float
    patch: int
    latent_channels: int
    vae_downsample: int
    text_tokens: int
    single_layers: int
    hf_model: str = ""
    """The Hugging Face id of the published weights (what an engine loads); empty for a shape only."""

    def token_params(self) -> float:
        """Parameters every token passes through (linear maps applied per token), all blocks."""
        h2, r = self.hidden**2, self.mlp_ratio
        if self.kind == "dit":
            return self.layers * (4 + 2 * r) * h2
        if self.kind == "pixart":
            return self.layers * (4 + 2 + 2 * r) * h2  # cross-attention's Q and O act on image tokens
        return self.layers * (4 + 2 * r) * h2 + self.single_layers * (4 + 2 * r) * h2

    def params(self) -> float:
        """All blocks' parameters (module docstring; embedders and the final layer are left out, < 1%)."""
        h2, r = self.hidden**2, self.mlp_ratio
        if self.kind == "dit":
            return self.layers * (4 + 2 * r + 6) * h2
        if self.kind == "pixart":
            return self.layers * (8 + 2 * r) * h2
        return self.layers * 2 * (4 + 2 * r + 6) * h2 + self.single_layers * (7 + 2 * r) * h2

    @property
    def attention_layers(self) -> int:
        return self.layers + (self.single_layers if self.kind == "mmdit" else 0)


@dataclass(frozen=True, kw_only=True)
class DitJob:
    """What is generated: ``batch`` images of ``resolution`` pixels a side in ``steps`` denoising steps."""

    resolution: int
    steps: int
    batch: int
    cfg: bool

    def image_tokens(self, spec: DitSpec) -> int:
        side = self.resolution // spec.vae_downsample // spec.patch
        return side * side

    @property
    def passes(self) -> int:
        """Model evaluations per step: two per image with classifier-free guidance."""
        return self.batch * (2 if self.cfg else 1)


def is_dit_data(data: dict[str, Any]) -> bool:
    return "dit" in data


def read_dit(path: Path) -> tuple[DitSpec, DitJob]:
    """The model and job a TOML file describes; one-line errors name the value and the rule."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{path}: {error}") from None
    try:
        d, j = data["dit"], data.get("job", {})
        spec = DitSpec(name=str(data.get("name", path.stem)), kind=str(d.get("kind", "dit")),  # type: ignore[arg-type]
                       hidden=int(d["hidden"]), layers=int(d["layers"]), heads=int(d["heads"]),
                       mlp_ratio=float(d.get("mlp_ratio", 4.0)), patch=int(d.get("patch", 2)),
                       latent_channels=int(d.get("latent_channels", 4)), vae_downsample=int(d.get("vae_downsample", 8)),
                       text_tokens=int(d.get("text_tokens", 0)), single_layers=int(d.get("single_layers", 0)),
                       hf_model=str(d.get("hf_model", "")))
        job = DitJob(resolution=int(j.get("resolution", 1024)), steps=int(j.get("steps", 50)),
                     batch=int(j.get("batch", 1)), cfg=bool(j.get("cfg", True)))
    except KeyError as missing:
        raise ConfigError(f"{path}: a DiT needs {missing.args[0]!r}") from None
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{path}: {error}") from None
    check_dit(spec, job, str(path))
    return spec, job


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
    if job.resolution % (spec.vae_downsample * spec.patch):
        raise ConfigError(f"{where}: resolution={job.resolution} must be a multiple of vae_downsample x patch = "
                          f"{spec.vae_downsample * spec.patch}")
    if job.steps < 1 or job.batch < 1:
        raise ConfigError(f"{where}: steps={job.steps} and batch={job.batch} must be >= 1")
