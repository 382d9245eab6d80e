"""Host overhead of runtime wrappers: what calibrate keeps is the measured time the cost model does not already charge."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from plait.cost import collectives as coll
from plait.engine.catalog import get_engine
from plait.hardware.catalog import cluster_from_mapping
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.run.overheads import LAYERS, host_figures, tiny_spec
from plait.workload.catalog import get_model
from tests.conftest import toy_cluster_mapping


def _cluster(**efficiency: float):  # type: ignore[no-untyped-def]
    raw = toy_cluster_mapping()
    raw["accelerator"] = "h100-sxm-80gb"
    cluster = cluster_from_mapping(raw, "toy")
    if not efficiency:
        return cluster
    from dataclasses import replace

    from plait.hardware.figure import Figure

    eff = replace(cluster.accelerator.efficiency,
                  **{k: Figure(value=v, source="assumed: test") for k, v in efficiency.items()})
    return replace(cluster, accelerator=replace(cluster.accelerator, efficiency=eff))


def test_layers_that_cost_only_their_collectives_have_no_host_overhead() -> None:
    cluster = _cluster()
    link = coll.group_link(cluster, 2, 1)
    params = tiny_spec(LAYERS[0]).layer_params(False)
    gather, reduce = coll.all_gather_s(2 * params, link), coll.reduce_scatter_s(4 * params, link)
    # FSDP2's copies on the compute stream: the bf16 gather's buffer read and the parameters written; the bf16
    # gradients read and the fp32 reduce-scatter buffer written (torch _fsdp_collectives.py)
    acc = cluster.accelerator
    bandwidth = acc.memory_bandwidth_bytes_per_s * acc.efficiency.memory.value
    copy_out, copy_in = (2 + 2) * params / bandwidth, (2 + 4) * params / bandwidth
    plain = (1e-3, 2e-3)
    layers = {"plain": plain, "fsdp": (plain[0] + gather + copy_out + 5e-4,
                                       plain[1] + gather + reduce + copy_out + copy_in),
              "tp": (plain[0], plain[1])}
    got = host_figures(layers, cluster)
    assert got["host_fsdp_layer_fwd_us"] == pytest.approx(500.0)
    assert got["host_fsdp_layer_bwd_us"] == pytest.approx(0.0, abs=0.01)
    assert got["host_tp_layer_fwd_us"] == 0.0  # never negative: faster than modelled counts as none


def test_host_overheads_add_per_layer_and_micro_batch() -> None:
    """Each FSDP2 layer pays its host time once per forward and once per backward of every micro-batch."""
    model = get_model("llama3-8b")
    plan = Plan(dp_shard=8, sharding="zero3", micro_batch=1, global_batch=16)  # 2 micro-batches per rank
    base = estimate(model, _cluster(), plan, engine=get_engine())
    slow = estimate(model, _cluster(host_fsdp_layer_fwd_us=100.0, host_fsdp_layer_bwd_us=300.0), plan,
                    engine=get_engine())
    extra = slow.time.fsdp_comm_s - base.time.fsdp_comm_s
    assert extra == pytest.approx(model.num_layers * 2 * (100 + 300) * 1e-6, rel=1e-6)


def test_eager_dispatch_is_the_plain_slope_beyond_the_modelled_kernels() -> None:
    from plait.cost.prepared import layer_columns
    from plait.run.overheads import PLANS

    cluster = _cluster()
    spec = tiny_spec(LAYERS[0])
    plain = PLANS["plain"]
    kernels, _ = layer_columns(spec, cluster, plain, get_engine("plait").framework)
    layers = {"plain": (kernels.fwd_s + 3e-4, kernels.bwd_s + 7e-4), "fsdp": (1.0, 1.0), "tp": (1.0, 1.0)}
    got = host_figures(layers, cluster)
    assert got["host_layer_fwd_us"] == pytest.approx(300.0)
    assert got["host_layer_bwd_us"] == pytest.approx(700.0)


def test_eager_dispatch_adds_to_every_layer_pass_and_to_recomputation() -> None:
    model = get_model("llama3-8b")
    for recompute, forwards in (("none", 1), ("full", 2)):
        plan = Plan(dp_replicate=8, micro_batch=1, global_batch=16, recompute=recompute)  # 2 micro-batches per rank
        base = estimate(model, _cluster(), plan, engine=get_engine())
        slow = estimate(model, _cluster(host_layer_fwd_us=100.0, host_layer_bwd_us=300.0), plan, engine=get_engine())
        extra = (slow.time.compute_s + slow.time.recompute_s) - (base.time.compute_s + base.time.recompute_s)
        assert extra == pytest.approx(model.num_layers * 2 * (forwards * 100 + 300) * 1e-6, rel=1e-6)
