"""Preset bus-bandwidth curves come from nccl-tests, whose busbw holds each size's latency: an all-reduce of the
measured group at a measured size must cost the measured time, not the measured time plus the latency steps."""

from __future__ import annotations

from dataclasses import replace

import pytest

from plait.cost.collectives import all_reduce_s, group_link
from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.hardware.net_curves import net_of_latency

# (preset, ranks of the nccl-tests run, bytes as the preset's curve records them, busbw GB/s in the source)
MEASURED = [
    # Azure/AI-benchmarking-guide Azure_Results/ND_A100_v4_results.md, "NCCL Bandwidth": 8x A100, NCCL 2.18.5,
    # all-reduce busbw 132.77 GB/s at "33M" and 213.87 at "268M" (the 1M point, 36.22, is beaten by NCCL's LL
    # protocol as plait models it, plait/cost/nccl_ll.py, and is not a pure curve read-out)
    ("dgx-a100-ib", 8, 33e6, 132.77),
    ("dgx-a100-ib", 8, 268e6, 213.87),
    # Azure/AI-benchmarking-guide Azure_Results/ND_GB200_v6_results.md, "NCCL Bandwidth": ND GB200 v6 (4 GPUs per
    # VM), ring all-reduce busbw 80.48 GB/s at "1M" and 422.62 at "33M"
    ("gb200-nvl72", 4, 1e6, 80.48),
    ("gb200-nvl72", 4, 33e6, 422.62),
]


@pytest.mark.parametrize(("preset", "ranks", "size_bytes", "busbw_gb_per_s"), MEASURED)
def test_all_reduce_at_a_measured_size_costs_the_measured_time(preset: str, ranks: int, size_bytes: float,
                                                               busbw_gb_per_s: float) -> None:
    measured_s = 2 * (ranks - 1) / ranks * size_bytes / (busbw_gb_per_s * 1e9)  # nccl-tests doc/PERFORMANCE.md
    predicted_s = all_reduce_s(size_bytes, group_link(get_cluster(preset), ranks, 1))
    # the presets round each busbw fraction of line rate to 3 digits: 0.089 for GB200's 80.48/900 is 0.5% off
    assert predicted_s == pytest.approx(measured_s, rel=6e-3)


def test_netting_is_done_once_and_only_for_nccl_tests_curves() -> None:
    tier = get_cluster("dgx-a100-ib").tiers[0]
    assert tier.curve_ranks == 0 and "net of 6 latency steps" in tier.efficiency.source
    assert net_of_latency(tier) is tier  # loaded net: a second netting changes nothing
    assert get_cluster("dgx-a100-ib").tiers[1].efficiency.sizes == (1.0,)  # a constant plateau stays as it is


def test_curve_ranks_of_one_is_refused() -> None:
    tier = get_cluster("dgx-a100-ib").tiers[0]
    with pytest.raises(ConfigError, match="curve_ranks=1"):
        replace(tier, curve_ranks=1)
