"""The host's time per output value when a diffusion pipeline hands back PIL images (``output_type="pil"``).

Run: python benchmarks/dit_postprocess_host.py [--side 4096] [--frames 1]   (torch, numpy and Pillow from plait's
environment; diffusers itself is not needed: the ops below are its code)

Every pipeline the DiT validation rows time ends its call by turning the decoded image (or each video frame) into
PIL images: diffusers' ``VaeImageProcessor.postprocess(image, output_type="pil")`` (huggingface/diffusers@58eb52c0,
src/diffusers/image_processor.py) denormalises on the GPU (``(x / 2 + 0.5).clamp(0, 1)``), then ``pt_to_numpy``:
``images.cpu().permute(0, 2, 3, 1).float().numpy()``, then ``numpy_to_pil``: ``(images * 255).round()
.astype("uint8")`` and ``Image.fromarray`` per image; ``VideoProcessor.postprocess_video`` runs the same per video,
its frames as the batch. The device-to-host copy is costed by plait from the host link; this script times the
host's part on a bf16 tensor already in host memory (the VAE's dtype in the xDiT examples): the permuted bf16 ->
fp32 conversion, the three numpy passes and the PIL wrapping. One torch thread (the numpy passes run on one thread
whatever torch's setting). Printed: CPU time (``time.thread_time``) per run, best and median of 7, and the
nanoseconds per output value (3 x side^2 x frames) that ``plait.hardware.host_postprocess`` holds.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from PIL import Image


def postprocess_pil(image_BCHW: torch.Tensor) -> list[Image.Image]:
    """diffusers' ``pt_to_numpy`` then ``numpy_to_pil`` (module docstring), the host's part."""
    images = image_BCHW.permute(0, 2, 3, 1).float().numpy()
    images = (images * 255).round().astype("uint8")
    return [Image.fromarray(one) for one in images]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", type=int, default=4096)
    parser.add_argument("--frames", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    image = (torch.rand(args.frames, 3, args.side, args.side) * 2 - 1).to(torch.bfloat16)
    image = (image / 2 + 0.5).clamp(0, 1)  # the GPU's denormalise, done before the copy
    postprocess_pil(image)
    runs = []
    for _ in range(7):
        cpu0 = time.thread_time()
        postprocess_pil(image)
        runs.append(time.thread_time() - cpu0)
    values = image.numel()
    print(f"{args.frames} x 3 x {args.side}^2 = {values} values: CPU s best {min(runs):.3f}, median "
          f"{statistics.median(runs):.3f}; ns per value best {min(runs) / values * 1e9:.2f}, median "
          f"{statistics.median(runs) / values * 1e9:.2f}; numpy {np.__version__}, torch {torch.__version__}")


if __name__ == "__main__":
    main()
