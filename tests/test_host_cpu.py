"""Host CPUs as hardware (plait.hardware.host_cpu): a host cost measured on one CPU scales to another by their
per-core scores in one benchmark; hand-computable cases and the packaged presets' CPUs."""

from __future__ import annotations

import re

import pytest

from plait.cost.input_pipeline import Loader, get_loader, loader_core_speed, loader_step_s
from plait.errors import ConfigError
from plait.hardware.catalog import cluster_names, get_cluster
from plait.hardware.figure import Figure
from plait.hardware.host_cpu import CoreScore, HostCpu, core_speed, get_host_cpu, host_cpu_names


def _cpu(slug: str, score: float | None, benchmark: str = "tjbench decode MP/s") -> HostCpu:
    per_core = None if score is None else CoreScore(value=score, benchmark=benchmark, source="https://example.test")
    return HostCpu(slug=slug, name=slug, source="assumed: test", per_core_score=per_core)


def test_a_host_half_as_fast_per_core_doubles_the_loaders_time() -> None:
    old, new = _cpu("old", 50.0), _cpu("new", 100.0)
    assert core_speed(old, new).value == pytest.approx(0.5)  # 50 / 100
    loader = Loader(kind="framework_jpeg", host_s_per_sample=Figure(value=0.004, source="assumed: test"))
    # 256 images at 4 ms each on 8 cores, each half as fast: 256 * 0.004 / (8 * 0.5) = 0.256 s
    assert loader_step_s(loader, 256, 8.0, core_speed=0.5) == pytest.approx(0.256)
    with pytest.raises(ConfigError, match="core_speed=0"):
        loader_step_s(loader, 256, 8.0, core_speed=0.0)


@pytest.mark.parametrize(
    ("host", "measured_on", "why"),
    [
        (_cpu("a", 50.0), _cpu("b", None), "no public per-core score found for b"),
        (_cpu("a", 50.0), _cpu("b", 100.0, "SPECrate2017_int_base per core"), "scores of different benchmarks"),
        (None, _cpu("b", 100.0), "not named"),
    ],
)
def test_an_unknown_ratio_is_one_and_says_so(host: HostCpu | None, measured_on: HostCpu, why: str) -> None:
    speed = core_speed(host, measured_on)
    assert speed.value == 1.0 and speed.source.startswith("assumed") and why in speed.source


def test_each_preset_names_the_cpu_its_core_count_source_states() -> None:
    named = 0
    for slug in cluster_names():
        cluster = get_cluster(slug)
        if not cluster.host_cpu:
            continue
        cpu = get_host_cpu(cluster.host_cpu)
        model = re.search(r"(E5-\d{4} v\d|Platinum \d{4}|EPYC \w+)", cpu.name)
        assert model and cpu.source.strip(), cpu
        if "EPYC 7R32" not in model.group(0):  # the g5 pages say "2nd-generation AMD EPYC" with no model number
            assert model.group(0).replace("Platinum ", "") in cluster.host_cores_source.replace("Platinum ", ""), slug
        named += 1
    assert named >= 7


def test_packaged_loaders_name_a_known_measuring_cpu_and_scale_by_one_until_a_score_is_found() -> None:
    for kind in ("framework_jpeg", "dali_cpu"):
        loader = get_loader(kind)
        assert loader.measured_on in host_cpu_names()
        speed = loader_core_speed(loader, get_cluster("dgx1-v100"))
        assert speed.value == 1.0 and "no public per-core score" in speed.source
    with pytest.raises(ConfigError, match="not in host_cpus.toml"):
        get_host_cpu("xeon-e5-9999")
