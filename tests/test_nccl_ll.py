"""NCCL's low-latency protocol for small collectives (plait.cost.nccl_ll), by hand from tuning.cc's figures."""

from __future__ import annotations

import pytest

from plait.cost import collectives as coll
from plait.cost.nccl_ll import ll_s
from plait.hardware.catalog import get_cluster


def test_a_small_all_reduce_in_one_node_by_hand() -> None:
    """8 H100 on NVLink, 4 KiB: 6.6 us + 14 steps x 0.6 us, and 14/8 of the buffer at the LL bus bandwidth, a quarter
    of the ring's 450 GB/s x 0.82 plateau (92.25 GB/s) capped at 87.7 GB/s."""
    link = coll.group_link(get_cluster("dgx-h100-ib"), 8, 1)
    expected = (6.6 + 14 * 0.6) * 1e-6 + 14 / 8 * 4096 / 87.7e9
    assert ll_s("all_reduce", 4096, link) == pytest.approx(expected)
    assert coll.all_reduce_s(4096, link) == pytest.approx(expected)  # the faster of the two protocols
    # an all-gather: 7 steps, a third of the ring's bandwidth (123 GB/s) capped at 87.7
    assert ll_s("all_gather", 4096, link) == pytest.approx((6.6 + 7 * 0.6) * 1e-6 + 7 / 8 * 4096 / 87.7e9)


def test_across_nodes_the_network_steps_and_the_overhead_count() -> None:
    """16 H100 over two nodes: 30 steps, 4 of them (2 x nodes) over the network at 2.7 us, the other 26 at the 1 us
    network post overhead; LL bus bandwidth capped at 39 GB/s over two nodes."""
    link = coll.group_link(get_cluster("dgx-h100-ib"), 16, 1)
    bus = min(39.0e9, link.bus_bytes_per_s(1e12) / 4)
    expected = (6.6 + 26 * 1.0 + 4 * 2.7) * 1e-6 + 30 / 16 * 4096 / bus
    assert ll_s("all_reduce", 4096, link) == pytest.approx(expected)


@pytest.mark.parametrize("num_bytes", [1e3, 1e5, 1e6, 1e7, 1e8, 1e9])
def test_a_collective_is_never_slower_than_either_protocol_and_large_ones_keep_the_measured_curve(
        num_bytes: float) -> None:
    link = coll.group_link(get_cluster("dgx-h100-ib"), 8, 1)
    time = coll.all_reduce_s(num_bytes, link)
    assert time <= ll_s("all_reduce", num_bytes, link) + 1e-15
    if num_bytes >= 1e8:  # a quarter of the bandwidth loses to any latency saved
        assert time < ll_s("all_reduce", num_bytes, link)


def test_one_rank_or_no_bytes_cost_nothing() -> None:
    cluster = get_cluster("dgx-h100-ib")
    assert ll_s("all_reduce", 4096, coll.group_link(cluster, 1, 1)) == 0.0
    assert ll_s("all_reduce", 0.0, coll.group_link(cluster, 8, 1)) == 0.0
