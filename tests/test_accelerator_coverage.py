"""The accelerators public benchmarks run on (K80 to MI325X): each loads from the catalog with a source on every
figure, and the figures a datasheet does not state directly follow from those it does by the stated rule."""

from __future__ import annotations

import re
import tomllib
from importlib import resources

import pytest

from plait.hardware.catalog import get_accelerator, get_cluster

NEW = ("v100-pcie", "p100", "p100-pcie", "k80", "t4", "a10", "a10g", "l4", "l20", "l40", "a800-80gb", "h800",
       "h20", "mi250x", "mi325x")
FIGURES = ("memory_gib", "memory_bandwidth_gb_per_s", "scale_up_bandwidth_gb_per_s", "pcie_bandwidth_gb_per_s",
           "tdp_w")


def _section_lines(slug: str) -> list[str]:
    """The raw lines of ``[slug]`` and ``[slug.peak_tflops]`` in accelerators.toml (comments kept)."""
    text = resources.files("plait.hardware").joinpath("data", "accelerators.toml").read_text(encoding="utf-8")
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith("["):
            inside = line.strip() in (f"[{slug}]", f"[{slug}.peak_tflops]")
        elif inside:
            lines.append(line)
    return lines


@pytest.mark.parametrize("slug", NEW)
def test_every_figure_carries_its_source(slug: str) -> None:
    acc = get_accelerator(slug)
    assert acc.source.strip() and acc.note.strip()
    numeric = [ln for ln in _section_lines(slug) if re.match(r"^\w+\s*=\s*[0-9.]+", ln)]
    named = {ln.split("=")[0].strip() for ln in numeric}
    assert set(FIGURES) <= named and set(acc.peak_tflops) <= named
    for line in numeric:  # the datasheet line, the derivation, or 'assumed: why' beside each number
        assert "#" in line and line.split("#", 1)[1].strip(), f"{slug}: {line!r} has no source comment"
    eff = acc.efficiency
    for figure in (eff.matmul_bf16, eff.attention, eff.memory, eff.kernel_launch_us, eff.comm_overlap):
        assert figure.source.strip()


PRE_TF32 = ("v100-pcie", "p100", "p100-pcie", "k80", "t4", "mi250x")
"""Kepler, Pascal, Volta, Turing and CDNA2: no TF32 mode in their datasheets."""
PRE_FP8 = (*PRE_TF32, "a10", "a10g", "a800-80gb")


@pytest.mark.parametrize("slug", NEW)
def test_dtypes_exist_only_where_the_architecture_has_them(slug: str) -> None:
    peaks = get_accelerator(slug).peak_tflops
    assert ("tf32" in peaks) == (slug not in PRE_TF32)
    assert ("fp8" in peaks) == (slug not in PRE_FP8)
    assert "fp32" in peaks and "fp16" in peaks
    if "bf16" in peaks:
        assert peaks["bf16"] == peaks["fp16"]


def test_derived_figures_follow_their_rules() -> None:
    # K80: one GK210 is half the board (24 GB, 480 GB/s, 8.73 TFLOPS at boost, 300 W); fp16 computes at fp32's rate
    k80 = get_accelerator("k80")
    assert (k80.memory_gib, k80.memory_bandwidth_gb_per_s, k80.tdp_w) == (24 / 2, 480 / 2, 300 / 2)
    assert k80.peak_tflops["fp32"] == pytest.approx(8.73 / 2) == k80.peak_tflops["fp16"]
    # MI250X: one GCD is half the module (128 GB, 3.2768 TB/s, 383 TFLOPS bf16, 560 W)
    gcd = get_accelerator("mi250x")
    assert (gcd.memory_gib, gcd.memory_bandwidth_gb_per_s, gcd.tdp_w) == (64, pytest.approx(3276.8 / 2), 280)
    assert gcd.peak_tflops["bf16"] == pytest.approx(383 / 2)
    # L4 quotes sparse peaks only: dense = half of 120 / 242 / 485
    assert get_accelerator("l4").peak_tflops == {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0,
                                                 "fp8": 242.5}
    # L20: the L40's dense rate per SM per GHz (181.05 on 142 SMs at 2.49 GHz) on 92 SMs at 2.52 GHz
    l20 = get_accelerator("l20").peak_tflops
    assert l20["bf16"] == pytest.approx(181.05 * 92 * 2.52 / (142 * 2.49), abs=0.05)
    assert l20["tf32"] == pytest.approx(l20["bf16"] / 2, abs=0.05) and l20["fp8"] == pytest.approx(2 * l20["bf16"])


@pytest.mark.parametrize(("export", "full", "nvlink_bidirectional_gb_per_s"),
                         [("a800-80gb", "a100-80gb", 400), ("h800", "h100-sxm-80gb", 400)])
def test_export_parts_differ_only_in_nvlink(export: str, full: str, nvlink_bidirectional_gb_per_s: float) -> None:
    cut, whole = get_accelerator(export), get_accelerator(full)
    assert cut.peak_tflops == whole.peak_tflops
    assert (cut.memory_gib, cut.memory_bandwidth_gb_per_s) == (whole.memory_gib, whole.memory_bandwidth_gb_per_s)
    assert cut.scale_up_bandwidth_gb_per_s == nvlink_bidirectional_gb_per_s / 2 < whole.scale_up_bandwidth_gb_per_s


def test_mi325x_is_the_mi300x_die_with_more_memory() -> None:
    assert get_accelerator("mi325x").peak_tflops == get_accelerator("mi300x").peak_tflops
    assert get_accelerator("mi325x").memory_gib == 256 > get_accelerator("mi300x").memory_gib


@pytest.mark.parametrize(("preset", "slug", "inner_gb_per_s"), [("dgx1-p100", "p100", 4 * 20),
                                                               ("aws-p2-8xlarge", "k80", 16 / 2)])
def test_classic_systems_carry_their_links(preset: str, slug: str, inner_gb_per_s: float) -> None:
    """DGX-1 (P100): 4 NVLink 1 links of 20 GB/s per direction; p2.8xlarge: one Gen3 x16 per board of 2 GPUs."""
    cluster = get_cluster(preset)
    assert cluster.accelerator == get_accelerator(slug)
    assert cluster.tiers[0].bandwidth_gb_per_s_per_gpu == inner_gb_per_s


def test_presets_file_names_only_known_accelerators() -> None:
    raw = tomllib.loads(resources.files("plait.hardware").joinpath("data", "clusters.toml").read_text("utf-8"))
    for slug in ("dgx1-p100", "aws-p2-8xlarge"):
        assert raw[slug]["accelerator"] in NEW


MEASURED_MM = {"rtx3090": ("bf16", 76.68), "l20": ("bf16", 114.14), "h20": ("bf16", 142.25),
               "l40s": ("bf16", 269.15), "a100-80gb": ("bf16", 264.53), "a800-80gb": ("bf16", 266.48),
               "h100-sxm-80gb": ("bf16", 797.51), "h200": ("bf16", 790.29), "v100": ("fp16", 94.84),
               "t4": ("fp16", 42.71), "l4": ("bf16", 70.89)}
"""Best torch.mm TFLOP/s of square matrices 1024..10240 measured on each part (zzc0721/torch-performance-test-data
@9d828276 database.md, and its issues #77, #79, #107, #120 for the H20, H100, L20 and L4; the repository's test.py:
10 warm-up and 30 timed products between CUDA events), the best of the rows where a part has several."""


@pytest.mark.parametrize("slug", sorted(MEASURED_MM))
def test_no_catalog_peak_is_below_what_torch_measures_on_the_part(slug: str) -> None:
    """A datasheet peak is at the part's rated boost clock; boards boost past it by up to ~15% (GeForce parts), never
    further: a measured product above 1.15 x the catalog's peak means the peak is misread (a GeForce RTX 3090's
    BF16 rate with FP32 accumulation once read as its TF32 rate)."""
    dtype, measured = MEASURED_MM[slug]
    assert measured <= 1.15 * get_accelerator(slug).peak_flops(dtype) / 1e12
