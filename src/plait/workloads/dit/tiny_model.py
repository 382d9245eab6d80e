"""A small diffusion transformer for plait's DiT runs on CPU: DiT's blocks (Peebles & Xie, ICCV 2023,
Sec. 3.2: adaLN-Zero modulation from the timestep and class, self-attention, a GELU MLP, a linear head back to
patches), with the attention handed to a pluggable function so that sequence parallelism (Ulysses, stale patches)
can replace it without touching the block.

Written here, not taken from diffusers or xDiT, because xDiT's parallel attention needs CUDA and NCCL and the test
needs the attention's inputs in hand; the block is DiT's. Weights are drawn from a seeded normal (not adaLN-Zero's
zeros, whose first output would be zero and test nothing).

Tensor legend: ``B`` images, ``S`` tokens of this rank, ``H`` hidden, ``N`` heads, ``D`` head width, ``P`` a
patch's values (``patch^2 x channels``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as fn
from torch import nn

Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""``(layer, q_BSND, k_BSND, v_BSND) -> out_BSND``: attention over the whole image's tokens."""
Velocity = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``(x_BSP, t_B) -> v_BSP``: the velocity a denoising step follows (guidance already applied)."""


def local_attention(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Attention when this rank holds every token."""
    return fn.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)


def timestep_embedding(t_B: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding of the timestep (DiT's TimestepEmbedder, after Vaswani et al. 2017, Sec. 3.5)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    args = t_B[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.norm2 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.fc1 = nn.Linear(hidden, round(mlp_ratio * hidden))
        self.fc2 = nn.Linear(round(mlp_ratio * hidden), hidden)
        self.modulation = nn.Linear(hidden, 6 * hidden)

    def forward(self, x_BSH: torch.Tensor, c_BH: torch.Tensor, layer: int, attend: Attend) -> torch.Tensor:
        shift1, scale1, gate1, shift2, scale2, gate2 = self.modulation(fn.silu(c_BH)).unsqueeze(1).chunk(6, dim=-1)
        h_BSH = self.norm1(x_BSH) * (1 + scale1) + shift1
        b, s, hidden = h_BSH.shape
        q, k, v = self.qkv(h_BSH).view(b, s, 3, self.heads, hidden // self.heads).unbind(dim=2)
        x_BSH = x_BSH + gate1 * self.proj(attend(layer, q, k, v).reshape(b, s, hidden))
        h_BSH = self.norm2(x_BSH) * (1 + scale2) + shift2
        return x_BSH + gate2 * self.fc2(fn.gelu(self.fc1(h_BSH), approximate="tanh"))


class TinyDiT(nn.Module):
    """DiT on patch tokens: ``forward`` takes this rank's tokens (their positions in the whole image) and returns
    the predicted velocity for them."""

    def __init__(self, hidden: int, heads: int, layers: int, patch_values: int, tokens: int, classes: int = 10,
                 mlp_ratio: float = 4.0, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Linear(patch_values, hidden)
        self.pos_SH = nn.Parameter(torch.randn(tokens, hidden) * 0.02)
        self.t_mlp = nn.Sequential(nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.null_class = classes  # the dropped label's row (DiT's LabelEmbedder keeps one for guidance)
        self.label = nn.Embedding(classes + 1, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads, mlp_ratio) for _ in range(layers))
        self.final_mod = nn.Linear(hidden, 2 * hidden)
        self.norm = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.head = nn.Linear(hidden, patch_values)
        with torch.no_grad():
            for p in self.parameters():
                if p.dim() >= 2 and p is not self.pos_SH:
                    p.normal_(0.0, 1.0 / math.sqrt(p.shape[-1]))

    def forward(self, x_BSP: torch.Tensor, t_B: torch.Tensor, y_B: torch.Tensor, positions: slice,
                attend: Attend = local_attention) -> torch.Tensor:
        c_BH = self.condition(t_B, y_B)
        x_BSH = self.tokens(x_BSP, positions)
        for layer, block in enumerate(self.blocks):
            x_BSH = block(x_BSH, c_BH, layer, attend)
        return self.out(x_BSH, c_BH)

    def condition(self, t_B: torch.Tensor, y_B: torch.Tensor) -> torch.Tensor:
        """The timestep's and class's embedding every block is modulated by."""
        return self.t_mlp(timestep_embedding(t_B, self.pos_SH.shape[1])) + self.label(y_B)

    def tokens(self, x_BSP: torch.Tensor, positions: slice) -> torch.Tensor:
        """Patches to hidden tokens at their positions in the whole image."""
        return self.embed(x_BSP) + self.pos_SH[positions]

    def out(self, x_BSH: torch.Tensor, c_BH: torch.Tensor) -> torch.Tensor:
        """The final modulated norm and the linear head back to patch values."""
        shift, scale = self.final_mod(fn.silu(c_BH)).unsqueeze(1).chunk(2, dim=-1)
        return self.head(self.norm(x_BSH) * (1 + scale) + shift)


def guide(v_cond: torch.Tensor, v_uncond: torch.Tensor, scale: float) -> torch.Tensor:
    """Classifier-free guidance: ``v_u + s (v_c - v_u)`` (Ho & Salimans, arXiv 2207.12598, Eq. 6 with
    ``s = 1 + w``)."""
    return v_uncond + scale * (v_cond - v_uncond)


def velocity(model: TinyDiT, y_B: torch.Tensor, positions: slice, attend: Attend = local_attention,
             guidance: float = 0.0) -> Velocity:
    """The model's velocity; with ``guidance`` > 0 the conditional and unconditional passes in one batch (as
    diffusers' pipelines run them) and guided."""
    def v(x_BSP: torch.Tensor, t_B: torch.Tensor) -> torch.Tensor:
        if not guidance:
            return model(x_BSP, t_B, y_B, positions, attend)  # type: ignore[no-any-return]
        null_B = torch.full_like(y_B, model.null_class)
        both = model(torch.cat([x_BSP, x_BSP]), torch.cat([t_B, t_B]), torch.cat([y_B, null_B]), positions, attend)
        return guide(*both.chunk(2), guidance)
    return v


def denoise(v: Velocity, x_BSP: torch.Tensor, steps: int,
            on_step: Callable[[int], None] | None = None) -> torch.Tensor:
    """Euler steps of a rectified flow from noise (t = 1) to data (t = 0), the model predicting the velocity
    (Liu et al., ICLR 2023, Sec. 2; SD3 and Flux sample so)."""
    with torch.no_grad():
        for i in range(steps):
            if on_step is not None:
                on_step(i)
            x_BSP = x_BSP + step_size(steps, i) * v(x_BSP, timestep(steps, i, x_BSP.shape[0]))
    return x_BSP


def timestep(steps: int, i: int, batch: int) -> torch.Tensor:
    """Step ``i``'s time for every image, t in [0, 1000]."""
    return torch.full((batch,), float(torch.linspace(1.0, 0.0, steps + 1)[i]) * 1000.0)


def step_size(steps: int, i: int) -> float:
    ts = torch.linspace(1.0, 0.0, steps + 1)
    return float(ts[i + 1] - ts[i])
