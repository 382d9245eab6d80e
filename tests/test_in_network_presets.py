"""In-network aggregation on the presets whose fabrics have it: NVLink SHARP in the H100 NVSwitch and SHARP on the
Quantum-2 InfiniBand switches of dgx-h100-ib; presets without aggregating switches never offer it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from plait.cost.collectives import all_reduce_s, group_link
from plait.cost.servers import _switch_s
from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.plan.plan import Plan
from plait.plan.rules import first_violation
from plait.predict.estimate import estimate
from plait.search.runner import run_search
from plait.search.space import default_space
from plait.sync import ALLREDUCE, parse
from plait.workload.catalog import get_model, resolve_model

SWITCH = parse("switch_aggregation")
WIDE = Path(__file__).parent / "data" / "wide-vocab-model.toml"


def test_nvlink_sharp_beats_the_ring_by_nccls_published_margin() -> None:
    """On 8 H100 in one NVSwitch, NCCL's NVLS all-reduce reaches ~480 GB/s busbw where the ring reaches ~370
    (NCCL maintainer, https://github.com/NVIDIA/nccl-tests/issues/212 and NVIDIA/nccl#1442: "a 30% improvement"):
    a 1 GiB gradient's switch sum is that much faster than its ring all-reduce, within 10%."""
    h100 = get_cluster("dgx-h100-ib")
    elements = 2**28
    ring = all_reduce_s(4 * elements, group_link(h100, 8, 1))
    assert ring / _switch_s(h100, SWITCH, elements, 8, 1) == pytest.approx(480 / 370, rel=0.10)


@pytest.mark.parametrize("preset, offered", [("dgx-h100-ib", True), ("a100-roce-1600", False),
                                             ("h100-roce-400", False)])
def test_the_planner_offers_switch_aggregation_only_where_switches_aggregate(preset: str, offered: bool) -> None:
    model, cluster = get_model("gpt3-125m"), get_cluster(preset)
    plan = Plan(dp_replicate=16, global_batch=16, dp_sync=SWITCH)
    broken = first_violation(plan, model, cluster)
    assert (broken is None) == offered, broken
    if not offered:
        assert broken is not None and broken[0] == "dp-sync-switch-aggregates"
        assert f"of cluster {cluster.name} does not" in broken[1]
    space = default_space(model, cluster, 16, (16,), dp_syncs=("allreduce", "switch_aggregation"))
    result = run_search(model, cluster, space, engine=get_engine("plait"), workers=1)
    costed = [cols.methods[cols["dp_sync"][row]] for cols, _, rows in result.feasible for row in rows]
    assert (SWITCH in costed) == offered
    assert (result.reasons["dp-sync-switch-aggregates"] > 0) == (not offered)


@pytest.mark.parametrize("preset, chosen", [("dgx-h100-ib", True), ("h100-mosaic", True), ("a100-roce-1600", False)])
def test_the_planner_chooses_the_switch_where_it_is_faster(preset: str, chosen: bool) -> None:
    """Whole, pure data-parallel replicas of a model whose gradient dwarfs its compute (a 1M-token embedding, 32-token sequences): on
    8 H100 the NVSwitch sum is faster than the ring all-reduce even though the ring overlaps the backward pass, and
    the planner ranks it first; on A100s (second-generation NVSwitch, no NVLink SHARP) it is never offered."""
    model, cluster = resolve_model(str(WIDE)), get_cluster(preset)
    space = replace(default_space(model, cluster, 8, (8,), seq_len=32, dp_syncs=("allreduce", "switch_aggregation")),
                    shardings=("none",), tp=(1,), pp=(1,), cp=(1,))
    best = run_search(model, cluster, space, engine=get_engine("plait"), workers=1).top(1)[0]
    assert (best.plan.dp_sync == SWITCH) == chosen
    if chosen:  # faster than the all-reduce at the very same layout
        ring = estimate(model, cluster, replace(best.plan, dp_sync=ALLREDUCE), engine=get_engine("plait"))
        assert best.step_time_s < ring.step_time_s


def test_sharp_across_nodes_beats_the_ring_over_infiniband() -> None:
    """Across DGX H100 nodes each NIC carries its node's shard once each way, where the ring sends ~2x the buffer
    over it (SHARP halves the bytes on the wire: Graham et al. ISC 2020); the NVLink reduce-scatter and all-gather
    stream beside it (NCCL's CollNet), so the switch is faster, but by less than the halved NIC bytes alone."""
    h100, elements = get_cluster("dgx-h100-ib"), 2**28
    ring = all_reduce_s(4 * elements, group_link(h100, 64, 1))
    switch = _switch_s(h100, SWITCH, elements, 64, 1)
    assert switch < ring < 2 * switch
