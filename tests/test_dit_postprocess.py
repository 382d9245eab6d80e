"""The host's conversion of a generation's pixels to PIL images (diffusers' default ``output_type="pil"``): hand
computations, the tensor-output case, and which validation sources take which."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from plait.hardware.catalog import get_cluster
from plait.workloads.dit.cost import DitPlan, estimate_dit
from plait.workloads.dit.model import read_dit
from plait.workloads.dit.pipeline import end_to_end, postprocess_s

ROOT = Path(__file__).resolve().parents[1]
H100 = get_cluster("dgx-h100-ib")


def test_a_1024px_image_is_its_values_copied_and_converted_by_hand() -> None:
    """3 x 1024 x 1024 = 3,145,728 values: bf16 over PCIe Gen5 (64 GB/s a direction) = 6,291,456 B / 64e9 =
    98.3 us; at 6.7 ns a value on the host = 21.076 ms; 21.174 ms in all."""
    spec, job = read_dit(ROOT / "examples" / "flux-1-dev-1024px.toml")
    assert postprocess_s(spec, job, H100) == pytest.approx(0.0983e-3 + 21.076e-3, rel=1e-3)


def test_a_video_converts_every_frame_and_a_tensor_output_nothing() -> None:
    """ConsisID 720 x 480 x 49 frames: 3 x 720 x 480 x 49 = 50,803,200 values x 6.7 ns = 0.3404 s on the host plus
    101.6 MB / 64 GB/s = 1.59 ms of copy; returned as a tensor, 0."""
    spec, job = read_dit(ROOT / "examples" / "consisid-480p.toml")
    job = replace(job, resolution=720, height=480, frames=49)
    assert postprocess_s(spec, job, H100) == pytest.approx(0.34038 + 1.5876e-3, rel=1e-3)
    assert postprocess_s(spec, replace(job, output="tensor"), H100) == 0.0


def test_the_conversion_is_part_of_the_end_to_end_time_and_no_gpu_count_shortens_it() -> None:
    spec, job = read_dit(ROOT / "examples" / "flux-1-dev-1024px.toml")
    one, four = (end_to_end(spec, job, plan, H100, estimate_dit(spec, job, plan, H100))
                 for plan in (DitPlan(), DitPlan(ulysses=4)))
    assert one.postprocess_s == four.postprocess_s > 0
    assert one.total_s == pytest.approx(one.text_encode_s + one.denoise_s + one.vae_decode_s + one.postprocess_s)


def test_only_the_sources_whose_pipelines_return_tensors_skip_the_conversion() -> None:
    """HunyuanVideo's official script and mochi-xdit hand back a tensor / array; the diffusers pipelines PIL."""
    from plait.validate.datasets import dataset_path
    from plait.validate.records import read_records
    from plait.workloads.dit.validate import COLUMNS, TENSOR_OUTPUT

    sources = {row["source_id"] for row in read_records(dataset_path("dit"), "--dit file", COLUMNS)}
    assert TENSOR_OUTPUT < sources  # every name is a source of the CSV (a typo would silently cost PIL)
