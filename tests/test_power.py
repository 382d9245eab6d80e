"""Power-limited GPUs: the measured power-limit law (power_cap.toml) and where a cluster states its limit."""

from __future__ import annotations

import pytest

from plait.errors import ConfigError
from plait.hardware import power
from plait.hardware.catalog import cluster_from_mapping, get_accelerator, get_cluster
from plait.hardware.power import CapPair, cap_pairs, clock_scale, throughput_exponent
from tests.conftest import toy_cluster_mapping


def test_clock_scale_limits() -> None:
    assert clock_scale(700.0, 700.0) == 1.0
    assert clock_scale(700.0, 900.0) == 1.0  # a limit above TDP does not overclock
    assert clock_scale(800.0, 200.0) == pytest.approx(0.25 ** throughput_exponent())


def test_exponent_is_least_squares_through_origin(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hand-computable: throughput ratios 2^-0.4 at half power and 4^-0.6 at a quarter give the log-log slope
    (0.4 ln2 ln2 + 0.6 ln4 ln4) / (ln2^2 + ln4^2) = (0.4 + 2.4) / 5 = 0.56."""

    def pair(ratio: float, limited: float) -> CapPair:
        return CapPair(
            accelerator="toy",
            benchmark="toy",
            rated_w=100.0,
            limit_w=100.0 * ratio,
            rated_samples_per_s=1.0,
            limited_samples_per_s=limited,
            source="hand-made",
        )

    monkeypatch.setattr(power, "cap_pairs", lambda: (pair(0.5, 2**-0.4), pair(0.25, 4**-0.6)))
    throughput_exponent.cache_clear()
    try:
        assert throughput_exponent() == pytest.approx(0.56)
    finally:
        throughput_exponent.cache_clear()


@pytest.mark.parametrize("pair", cap_pairs(), ids=lambda p: p.benchmark.split(",")[0] + "@" + p.accelerator)
def test_mlperf_power_limit_pairs(pair: CapPair) -> None:
    """NVIDIA's MLPerf Inference MaxP/MaxQ pairs (power_cap.toml): each below the cube-root clock law (which leaves
    out static power) and above a linear one (a voltage floor, no static power); one exponent holds each within 2%."""
    assert get_accelerator(pair.accelerator).tdp_w == pair.rated_w
    assert pair.power_ratio < pair.throughput_ratio < pair.power_ratio ** (1 / 3)
    assert clock_scale(pair.rated_w, pair.limit_w) == pytest.approx(pair.throughput_ratio, rel=0.02)


def test_exponent_lies_between_cube_root_and_linear() -> None:
    assert 1 / 3 < throughput_exponent() < 1.0


def test_grand_teton_is_between_nvl_and_sxm() -> None:
    """torchtitan: the 500 W Grand Teton H100's peak "should be between SXM and NVL" (arXiv 2410.06511)."""
    capped = get_cluster("h100-grandteton-roce").accelerator
    sxm, nvl = get_accelerator("h100-sxm-80gb"), get_accelerator("h100-94gb")
    assert capped.peak_tflops["bf16"] == pytest.approx(989.4 * (500 / 700) ** throughput_exponent())
    assert nvl.peak_tflops["bf16"] < capped.peak_tflops["bf16"] < sxm.peak_tflops["bf16"]
    assert capped.memory_bandwidth_gb_per_s == get_accelerator("h100-96gb").memory_bandwidth_gb_per_s


def test_user_cluster_power_limit() -> None:
    raw = toy_cluster_mapping()
    raw.update(accelerator="h100-sxm-80gb", power_limit_w=350)
    acc = cluster_from_mapping(raw, "file.toml").accelerator
    assert acc.peak_tflops["bf16"] == pytest.approx(989.4 * 0.5 ** throughput_exponent())
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


def test_bad_pair_is_one_line_error() -> None:
    with pytest.raises(ConfigError, match="limit_w=800.0 must lie in"):
        CapPair(
            accelerator="x",
            benchmark="b",
            rated_w=700.0,
            limit_w=800.0,
            rated_samples_per_s=1.0,
            limited_samples_per_s=1.0,
            source="s",
        )
