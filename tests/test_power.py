"""Power-limited GPUs: the cube-root clock law and where a cluster states its limit."""

from __future__ import annotations

import pytest

from plait.errors import ConfigError
from plait.hardware.catalog import cluster_from_mapping, get_accelerator, get_cluster
from plait.hardware.power import clock_scale
from tests.conftest import toy_cluster_mapping


def test_clock_scale_cube_root() -> None:
    assert clock_scale(700.0, 700.0) == 1.0
    assert clock_scale(700.0, 900.0) == 1.0  # a limit above TDP does not overclock
    assert clock_scale(800.0, 100.0) == pytest.approx(0.5)  # (1/8)^(1/3)


def test_grand_teton_is_between_nvl_and_sxm() -> None:
    """torchtitan: the 500 W Grand Teton H100's peak "should be between SXM and NVL" (arXiv 2410.06511)."""
    capped = get_cluster("h100-grandteton-roce").accelerator
    sxm, nvl = get_accelerator("h100-sxm-80gb"), get_accelerator("h100-94gb")
    assert capped.peak_tflops["bf16"] == pytest.approx(989.4 * (500 / 700) ** (1 / 3))
    assert nvl.peak_tflops["bf16"] < capped.peak_tflops["bf16"] < sxm.peak_tflops["bf16"]
    assert capped.memory_bandwidth_gb_per_s == get_accelerator("h100-96gb").memory_bandwidth_gb_per_s


def test_user_cluster_power_limit() -> None:
    raw = toy_cluster_mapping()
    raw.update(accelerator="h100-sxm-80gb", power_limit_w=350)
    acc = cluster_from_mapping(raw, "file.toml").accelerator
    assert acc.peak_tflops["bf16"] == pytest.approx(989.4 * 0.5 ** (1 / 3))
    assert acc.memory_bandwidth_gb_per_s == 3350.0


def test_bad_power_limit_is_one_line_error() -> None:
    raw = toy_cluster_mapping()
    raw.update(accelerator="h100-sxm-80gb", power_limit_w="lots")
    with pytest.raises(ConfigError, match="power_limit_w='lots' must be a number of watts"):
        cluster_from_mapping(raw, "file.toml")
    raw["power_limit_w"] = -5
    with pytest.raises(ConfigError, match="power_limit_w=-5.0 must be > 0"):
        cluster_from_mapping(raw, "file.toml")


def test_unknown_tdp_is_not_scaled() -> None:
    assert clock_scale(0.0, 300.0) == 1.0
