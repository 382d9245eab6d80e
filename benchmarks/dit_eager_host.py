"""The host's framework time per eager op of a DiT block: diffusers' FLUX.1 blocks run eagerly on tiny CPU tensors.

Run: python benchmarks/dit_eager_host.py [--tokens 1] [--dtype bfloat16]   (needs ``pip install diffusers==0.31.0``,
the release current when xDiT's FLUX.1 table was measured; torch from plait's environment; with diffusers 0.32.0,
which has Sana's block, it also counts the ops of Sana's and CogVideoX's (ConsisID's) blocks)

What an eager PyTorch step costs the host beyond the CUDA launch call itself (``host_launch_us``): the Python of
diffusers' forward code (module calls, the attention processor, the rotary embedding) and PyTorch's dispatch of every
op (argument parsing, dispatcher, TensorIterator, output allocation). On tiny CPU tensors the kernels are a few
elements, so the CPU time of a block's forward is that framework time (plus the tiny kernels, which makes it err
high by about a bare op's, ``x + 1``, printed beside it). The double- and single-stream blocks are FLUX.1-dev's
classes at 2 heads of 32 (the Python path does not depend on the width), one thread, under ``torch.no_grad`` as
the pipelines run them. Printed: the ops each block dispatches (views not counted; they launch no kernel), its CPU
time (``time.thread_time``, best of 5 x 200 calls, and wall time) and the CPU time per op, which
``plait.hardware.eager_dispatch`` holds as ``EAGER_DISPATCH_US``; then the ops of Sana's and CogVideoX's blocks where the
installed diffusers has them (counts only: their CPU time includes CPU convolutions and masked attention, which a
GPU runs as kernels).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class _CountOps(TorchDispatchMode):
    """Counts the ATen ops that run a kernel (views do not)."""

    def __init__(self) -> None:
        super().__init__()
        self.num_ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.num_ops += 0 if func.is_view else 1
        return func(*args, **(kwargs or {}))


def _cpu_us(call: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Best of 5 of the mean CPU and wall microseconds of ``call`` over ``repeats`` calls."""
    for _ in range(20):
        call()
    runs = []
    for _ in range(5):
        cpu0, wall0 = time.thread_time(), time.perf_counter()
        for _ in range(repeats):
            call()
        runs.append(((time.thread_time() - cpu0) / repeats * 1e6, (time.perf_counter() - wall0) / repeats * 1e6))
    return min(runs)


def _count_other_blocks(dtype: torch.dtype) -> None:
    """Ops of Sana's block (4 x 4 latent pixels, 8 text tokens with a mask) and CogVideoX's (16 video and 8 text
    tokens, rotary on the video's), at width 64, where the installed diffusers has them."""
    try:
        from diffusers.models.transformers.cogvideox_transformer_3d import CogVideoXBlock
        from diffusers.models.transformers.sana_transformer import SanaTransformerBlock
    except ImportError:
        print("Sana and CogVideoX blocks: not in this diffusers (0.32.0 has them)")
        return
    dim, side = 64, 4
    video, text = torch.randn(1, side * side, dim, dtype=dtype), torch.randn(1, 8, dim, dtype=dtype)
    sana = SanaTransformerBlock(dim=dim, num_attention_heads=2, attention_head_dim=32, num_cross_attention_heads=2,
                                cross_attention_head_dim=32, cross_attention_dim=dim).to(dtype).eval()
    cog = CogVideoXBlock(dim=dim, num_attention_heads=1, attention_head_dim=64, time_embed_dim=dim).to(dtype).eval()
    rotary = (torch.randn(side * side, 64), torch.randn(side * side, 64))
    modulation, temb = torch.randn(1, 6 * dim, dtype=dtype), torch.randn(1, dim, dtype=dtype)
    mask = torch.zeros(1, 1, 8, dtype=dtype)
    calls = {"Sana block": lambda: sana(video, encoder_hidden_states=text, encoder_attention_mask=mask,
                                        timestep=modulation, height=side, width=side),
             "CogVideoX block": lambda: cog(video, text, temb, image_rotary_emb=rotary)}
    for name, call in calls.items():
        with _CountOps() as count:
            call()
        print(f"{name}: {count.num_ops} ops")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1, help="image tokens (and text tokens) per block call")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    args = parser.parse_args()
    from diffusers.models.embeddings import FluxPosEmbed
    from diffusers.models.transformers.transformer_flux import FluxSingleTransformerBlock, FluxTransformerBlock

    torch.manual_seed(0)
    torch.set_num_threads(1)
    dtype, heads, head_dim = getattr(torch, args.dtype), 2, 32
    dim, n = heads * head_dim, args.tokens
    double = FluxTransformerBlock(dim=dim, num_attention_heads=heads, attention_head_dim=head_dim).to(dtype).eval()
    single = FluxSingleTransformerBlock(dim=dim, num_attention_heads=heads, attention_head_dim=head_dim)
    single = single.to(dtype).eval()
    rotary = FluxPosEmbed(theta=10000, axes_dim=[8, 12, 12])(torch.zeros(2 * n, 3))
    image, text = torch.randn(1, n, dim, dtype=dtype), torch.randn(1, n, dim, dtype=dtype)
    temb, joined = torch.randn(1, dim, dtype=dtype), torch.randn(1, 2 * n, dim, dtype=dtype)
    calls = {"double-stream block": lambda: double(hidden_states=image, encoder_hidden_states=text, temb=temb,
                                                   image_rotary_emb=rotary),
             "single-stream block": lambda: single(hidden_states=joined, temb=temb, image_rotary_emb=rotary)}
    total_us = total_ops = 0.0
    with torch.no_grad():
        for name, call in calls.items():
            with _CountOps() as count:
                call()
            cpu_us, wall_us = _cpu_us(call, 200)
            total_us, total_ops = total_us + cpu_us, total_ops + count.num_ops
            print(f"{name}: {count.num_ops} ops, {cpu_us:.0f} us CPU ({wall_us:.0f} us wall), "
                  f"{cpu_us / count.num_ops:.1f} us CPU per op")
        bare_us, _ = _cpu_us(lambda: image + 1, 5000)
        print(f"both blocks: {total_us / total_ops:.1f} us CPU per op; a bare x + 1: {bare_us:.1f} us CPU")
        _count_other_blocks(dtype)
    print(f"torch {torch.__version__}, {args.dtype}, {n} tokens, load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
