"""Layer (a): collective and pipeline formulas on a toy cluster, computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from plait.cost import collectives as coll
from plait.cost.pipeline import inflight_micro_batches, pipeline_time_s
from plait.hardware.cluster import Cluster, NetworkTier
from plait.hardware.figure import Curve
from plait.plan.columns import PlanColumns
from plait.plan.plan import Plan

GB = 1e9


def test_all_reduce_inside_a_node(toy_cluster: Cluster) -> None:
    link = coll.group_link(toy_cluster, 8, 1)
    assert coll.all_reduce_s(GB, link) == pytest.approx(2 * 7 / 8 * GB / (100 * GB))


def test_all_reduce_across_two_full_nodes_drives_eight_nics(toy_cluster: Cluster) -> None:
    link = coll.group_link(toy_cluster, 16, 1)
    assert link.bus_bytes_per_s(GB) == pytest.approx(80 * GB)  # min(NVLink 100, 8 NICs x 10)
    assert coll.all_reduce_s(GB, link) == pytest.approx(2 * 15 / 16 * GB / (80 * GB))


def test_one_rank_per_node_gets_one_nic(toy_cluster: Cluster) -> None:
    link = coll.group_link(toy_cluster, 16, 8)
    assert coll.all_gather_s(GB, link) == pytest.approx(15 / 16 * GB / (10 * GB))


def test_p2p_and_all_to_all(toy_cluster: Cluster) -> None:
    across = coll.group_link(toy_cluster, 2, 8)
    assert coll.p2p_s(GB, across) == pytest.approx(0.1)
    inside = coll.group_link(toy_cluster, 8, 1)
    assert coll.all_to_all_s(GB, inside) == pytest.approx(7 / 8 * GB / (100 * GB))


def test_single_rank_groups_cost_nothing(toy_cluster: Cluster) -> None:
    link = coll.group_link(toy_cluster, 1, 1)
    assert coll.all_reduce_s(GB, link) == coll.all_gather_s(GB, link) == coll.p2p_s(GB, link) == 0.0


def test_latency_term_ring_vs_tree() -> None:
    instant = NetworkTier(name="t", span_gpus=1024, bandwidth_gb_per_s_per_gpu=1e21, latency_us=1.0,
                          efficiency=Curve(value=1.0, source="assumed: test"), source="assumed: test")
    link = coll.GroupLink(size=1024, latency_s=1e-6, tier=1, members_per_domain=1, paths=((1, instant),))
    assert coll.all_reduce_s(1.0, link) == pytest.approx(2 * 10 * 1e-6, rel=1e-6)  # tree: 2 log2(1024) steps
    assert coll.all_gather_s(1.0, link) == pytest.approx(1023 * 1e-6, rel=1e-6)  # ring: g - 1 steps


def _pipeline(plan: Plan, fwd: float, bwd: float) -> tuple[float, float]:
    cols = PlanColumns.from_plans([plan])
    busy, bubble = pipeline_time_s(cols, np.array([fwd + bwd]), np.array([fwd + bwd]), np.array([bwd]), np.array([bwd / 2]))
    return float(busy[0]), float(bubble[0])


@pytest.mark.parametrize("p,m", [(4, 8), (8, 32), (2, 2)])
def test_1f1b_time_is_m_plus_p_minus_1_stage_times(p: int, m: int) -> None:
    busy, bubble = _pipeline(Plan(pp=p, micro_batch=1, global_batch=m), 1.0, 2.0)
    assert busy + bubble == pytest.approx((m + p - 1) * 3.0)
    assert bubble / busy == pytest.approx((p - 1) / m)  # Narayanan et al. 2021, Sec. 2.2.1


def test_interleaved_bubble_divides_by_v() -> None:
    busy, bubble = _pipeline(Plan(pp=4, vpp=2, schedule="interleaved", micro_batch=1, global_batch=8), 1.0, 2.0)
    assert bubble / busy == pytest.approx((4 - 1) / (2 * 8))  # Narayanan et al. 2021, Sec. 2.2.2


def test_zb_h1_bubble_is_one_forward_per_stage() -> None:
    _, bubble = _pipeline(Plan(pp=4, schedule="zb-h1", micro_batch=1, global_batch=8), 1.0, 2.0)
    assert bubble == pytest.approx(3 * 1.0)


@pytest.mark.parametrize("plan,stage,held", [
    (Plan(pp=4, global_batch=16), 0, 4),
    (Plan(pp=4, global_batch=16), 3, 1),
    (Plan(pp=4, schedule="gpipe", global_batch=16), 3, 16),
    (Plan(pp=4, vpp=3, schedule="interleaved", global_batch=16), 0, 5),
    (Plan(global_batch=16), 0, 1),
])
def test_inflight_micro_batches(plan: Plan, stage: int, held: float) -> None:
    cols = PlanColumns.from_plans([plan])
    assert float(inflight_micro_batches(cols, np.array([stage]))[0]) == pytest.approx(held)


def test_curve_interpolates_in_log_size() -> None:
    curve = Curve(sizes=(1024.0, 4096.0), fractions=(0.2, 0.6), source="assumed: test")
    assert curve.at(512) == 0.2 and curve.at(8192) == 0.6
    assert curve.at(2048) == pytest.approx(0.4)  # halfway in log2


def test_message_size_lowers_bus_bandwidth() -> None:
    from plait.hardware.catalog import get_cluster

    link = coll.group_link(get_cluster("dgx-a100-ib"), 8, 1)
    assert link.bus_bytes_per_s(1e6) < link.bus_bytes_per_s(1e9) <= 300 * GB


def test_a_measured_reduce_scatter_curve_is_used(toy_cluster: Cluster) -> None:
    """A tier that measures its own reduce-scatter (gloo's is slower than its all-reduce) costs it by that curve;
    the all-gather keeps the tier's curve."""
    from dataclasses import replace

    half = Curve(value=0.5 * toy_cluster.tiers[0].efficiency.at(GB), source="assumed: test")
    tiers = (replace(toy_cluster.tiers[0], reduce_scatter_efficiency=half), *toy_cluster.tiers[1:])
    slow = replace(toy_cluster, tiers=tiers)
    fast_link, slow_link = coll.group_link(toy_cluster, 8, 1), coll.group_link(slow, 8, 1)
    assert coll.all_gather_s(GB, slow_link) == coll.all_gather_s(GB, fast_link)
    bandwidth_part = coll.reduce_scatter_s(GB, fast_link) - 7 * fast_link.latency_s
    assert coll.reduce_scatter_s(GB, slow_link) - 7 * slow_link.latency_s == pytest.approx(2 * bandwidth_part)


@pytest.mark.parametrize(("p", "v", "m"), [(2, 2, 4), (4, 2, 8), (4, 3, 8), (4, 8, 4), (8, 4, 16), (4, 4, 4)])
def test_interleaved_inflight_matches_the_schedule_order_on_every_stage(p: int, v: int, m: int) -> None:
    """The closed form equals the most forward chunks outstanding (forwards run minus backwards run) in
    Megatron-LM's interleaved order, replayed op by op (:func:`plait.simulate.schedules.interleaved`), over ``v``:
    in micro-batches of a whole stage. The last stage holds far more than 1F1B's one."""
    from plait.simulate.schedules import interleaved

    plan = Plan(pp=p, vpp=v, schedule="interleaved", micro_batch=1, global_batch=m)
    cols = PlanColumns.from_plans([plan])
    for rank in range(p):
        outstanding = peak = 0
        for kind, _, _ in interleaved(p, m, rank, v):
            outstanding += 1 if kind == "F" else -1
            peak = max(peak, outstanding)
        assert float(inflight_micro_batches(cols, np.array([rank]))[0]) == pytest.approx(peak / v), rank
