"""What ``plait calibrate`` writes about its collectives: the library it timed them on (gloo on a CPU), and tiers whose
alpha-beta cost gives back the times it measured (:func:`plait.run.calibrate.bus_bandwidths`). No ranks are spawned:
the measurements are replaced by chosen seconds, and every expected figure is worked out by hand from them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

KIB4, KIB256, MIB16 = 4096, 2**18, 2**24
# Chosen seconds per collective of 2 ranks: all-reduce bus bytes = the buffer; all-gather/reduce-scatter half of it.
TIMES = {"all_reduce": [659.6e-6, 250e-6 + 0.9 * KIB256 / 1e9, MIB16 / 1e9],
         "all_gather": [0.5 * KIB4 / 5e6 + 125e-6, 0.5 * KIB256 / 2.5e8 + 125e-6, 0.5 * MIB16 / 5e8 + 125e-6],
         "reduce_scatter": [0.5 * KIB4 / 5e6 + 125e-6, 0.5 * KIB256 / 2.5e8 + 125e-6, 0.5 * MIB16 / 2.5e8 + 125e-6]}
LATENCY_S = 250e-6  # a 16-byte all-reduce: 2 ring steps of 125 us


def _described(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    import plait.run.calibrate as calibrate

    def collective_times(world: int, sizes: list[int], tmp: Path, layers: bool = False, rounds: int = 5):  # type: ignore[no-untyped-def]
        (tmp / "allreduce.txt.overlap").write_text("0.0")
        (tmp / "allreduce.txt.rss").write_text(str(2**28))
        assert sizes[0] == 8 * world  # the latency's all-reduce is swept first, then the sizes
        return {kind: [LATENCY_S, *seconds] for kind, seconds in TIMES.items()}

    figures = {"core_share": 1.0, "fp32": [0.1, 0.2, 0.2, 0.2], "bf16": [0.1, 0.2, 0.2, 0.2],
               "wgrad": [0.1, 0.2, 0.2, 0.2], "attention": [0.1, 0.1, 0.1, 0.1], "memory_bw": 10.0,
               "memory_fraction": 0.5, "launch_us": 5.0, "dispatch_us": 3.0, "sampling_ns": (0.0, 0.0)}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(calibrate, "compute_figures", lambda *args: figures)
    monkeypatch.setattr(calibrate, "collective_times", collective_times)
    return calibrate.describe_machine(2, tmp_path, quick=True)


def test_a_cpu_calibration_names_gloo_and_its_small_all_reduce_is_alpha_plus_bytes_over_bandwidth(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The file says gloo; its 4 KiB all-reduce costs 2 steps of 125 us plus 4 KiB at the curve's bandwidth, which
    is the 659.6 us measured: 0.01 of the 1 GB/s line rate over the 409.6 us left after the latency (the 16 MiB
    all-reduce's bus bandwidth). Read as NCCL's, the same tiers still take no LL protocol: CPU ranks never do, so an
older file without the key costs the same."""
    from plait.cost.collectives import all_gather_s, all_reduce_s, group_link
    from plait.engine.backends import with_backend
    from plait.errors import ConfigError
    from plait.hardware.catalog import cluster_from_mapping

    table = _described(monkeypatch, tmp_path)
    assert table["collective_backend"] == "gloo"
    tier = table["tiers"][0]
    assert (tier["bandwidth_gb_per_s_per_gpu"], tier["latency_us"]) == (1.0, 125.0)
    assert tier["efficiency"]["fractions"] == [0.01, 1.0, 1.0]  # beyond 4 KiB: above the line rate, capped
    cluster = cluster_from_mapping(table, "calibrated")
    link = group_link(cluster, 2, 1)
    assert all_reduce_s(KIB4, link) == pytest.approx(2 * 125e-6 + KIB4 / (0.01 * 1e9))
    assert all_reduce_s(KIB4, link) == pytest.approx(TIMES["all_reduce"][0])
    assert all_gather_s(KIB4, link) == pytest.approx(TIMES["all_gather"][0])  # 1 step + 2 KiB at 5 MB/s
    as_nccl = cluster_from_mapping({**table, "collective_backend": "nccl"}, "read as NCCL's")
    assert all_reduce_s(KIB4, group_link(as_nccl, 2, 1)) == pytest.approx(659.6e-6, rel=1e-9)
    assert with_backend(cluster, "gloo") is cluster  # the measured tiers, not backends.toml's gloo view of NCCL's
    with pytest.raises(ConfigError, match="relative to NCCL"):
        with_backend(cluster, "mpi")


def test_a_size_no_slower_than_its_latency_steps_reads_the_line_rate() -> None:
    from plait.run.calibrate import bus_bandwidths

    line, busbw = bus_bandwidths(2, [KIB4, MIB16], {"all_reduce": [200e-6, MIB16 / 2e9]}, 125.0)
    assert line == pytest.approx(2.0)  # 16 MiB in 8.39 ms
    assert busbw["all_reduce"] == pytest.approx([2.0, MIB16 / (MIB16 / 2e9 - 250e-6) / 1e9])
