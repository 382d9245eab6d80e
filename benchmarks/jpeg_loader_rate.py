"""Images per second one CPU core decodes and augments as PyTorch's ImageNet loader does (PIL decode,
RandomResizedCrop to 224, horizontal flip, uint8 array): the host cost per sample of a framework JPEG loader
(``plait/hardware/data/loaders.toml``).

The test image is a synthetic 500x375 photo-like picture (smooth gradients plus texture noise) saved at JPEG
quality 90: ImageNet's training JPEGs average ~110 KB at about 400x350 to 500x375 pixels. Usage:
``python benchmarks/jpeg_loader_rate.py`` (prints images per wall-clock second and per CPU second of the one
process, the file size, and the CPU it ran on as ``/proc/cpuinfo`` names it: a figure scales to another host by
the two CPUs' per-core scores, ``plait/hardware/host_cpu.py``, so the CPU must be recorded with it). On a shared,
loaded machine the CPU-second rate is the one to keep: a single-threaded decode's work per CPU second barely
depends on how many other processes wait for the core.
"""

from __future__ import annotations

import io
import random
import time

import numpy as np
from PIL import Image


def test_image(width: int = 500, height: int = 375, seed: int = 0) -> bytes:
    """A photo-like JPEG: low-frequency colour fields plus mild texture, quality 90."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width] / max(width, height)
    fields = [np.sin(6.28 * (a * x + b * y) + c) for a, b, c in rng.uniform(0.5, 3.0, (3, 3))]
    pixels = np.stack(fields, -1) * 90 + 128 + rng.normal(0, 12, (height, width, 3))
    out = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(out, "JPEG", quality=90)
    return out.getvalue()


def augment(data: bytes, rng: random.Random) -> np.ndarray:
    """torchvision's RandomResizedCrop(224) (scale 0.08-1, ratio 3/4-4/3) and RandomHorizontalFlip on a PIL decode."""
    image = Image.open(io.BytesIO(data)).convert("RGB")
    w, h = image.size
    area = w * h * rng.uniform(0.08, 1.0)
    ratio = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
    cw, ch = min(w, int(round((area * ratio) ** 0.5))), min(h, int(round((area / ratio) ** 0.5)))
    left, top = rng.randint(0, w - cw), rng.randint(0, h - ch)
    image = image.resize((224, 224), Image.BILINEAR, box=(left, top, left + cw, top + ch))
    if rng.random() < 0.5:
        image = image.transpose(Image.FLIP_LEFT_RIGHT)
    return np.asarray(image)


def cpu_identity() -> str:
    """The CPU as ``/proc/cpuinfo`` states it: model name, family, model, stepping and clock (a VM may hide the
    model name; the family and model still tell the microarchitecture)."""
    try:
        with open("/proc/cpuinfo") as info:
            first = info.read().split("\n\n")[0]
    except OSError:
        return "unknown CPU"
    fields = {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in first.splitlines())}
    return ", ".join(f"{k}={fields.get(k, '?')}" for k in ("model name", "cpu family", "model", "stepping", "cpu MHz"))


def main(seconds: float = 5.0) -> None:
    data, rng = test_image(), random.Random(0)
    done, start, cpu_start = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        augment(data, rng)
        done += 1
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    print(
        f"{done / wall:.0f} images per wall-clock second, {done / cpu:.0f} per CPU second, on one core "
        f"({len(data) / 1e3:.0f} KB JPEG, 500x375, PIL {Image.__version__}); CPU: {cpu_identity()}"
    )


if __name__ == "__main__":
    main()
