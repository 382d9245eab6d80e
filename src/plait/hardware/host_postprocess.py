"""The host's time per output value when a diffusion pipeline hands back PIL images.

diffusers' pipelines end with ``output_type="pil"`` by default: ``VaeImageProcessor.postprocess`` copies the
denormalised image to the host and converts it there, ``images.cpu().permute(0, 2, 3, 1).float().numpy()``, then
``(images * 255).round().astype("uint8")`` and ``Image.fromarray`` per image (huggingface/diffusers@58eb52c0,
src/diffusers/image_processor.py ``pt_to_numpy``, ``numpy_to_pil``; ``VideoProcessor.postprocess_video`` runs the
same per video). These passes run on one CPU thread over every value of the output (3 colour channels a pixel, every
frame), after the GPU's work, inside the timed pipeline call: a cost that no number of GPUs shortens. This figure is
that host time per value; the device-to-host copy before it is costed from the accelerator's host link
(:func:`plait.workloads.dit.pipeline.postprocess_s`).
"""

from __future__ import annotations

from plait.hardware.figure import Figure

POSTPROCESS_NS_PER_VALUE = Figure(
    value=6.7,
    source="measured by python benchmarks/dit_postprocess_host.py on 2026-12-06 (torch 2.13 CPU build, numpy 2.4.6, "
           "one thread, this repository's 2-core Xeon host at load average 8-11): the CPU time of diffusers' "
           "pt_to_numpy and numpy_to_pil ops on a 4096 x 4096 bf16 image (50.3 M values), medians 6.5-6.8 ns per "
           "value in 3 runs of 7, median 6.7; a 1024 x 1024 image (3.1 M values, its arrays nearer the cache) "
           "takes 2.8 ns per value, so small outputs err slow; the host CPU of the measured GPUs is not stated "
           "by their sources")
"""Host CPU time per output value of the PIL conversion (module docstring)."""
