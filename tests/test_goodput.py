"""Goodput: Young's and Daly's checkpoint intervals and expected wall time against their closed forms,
the packaged failure rates against the Llama 3 paper's table, and the whole against its limits."""

from __future__ import annotations

import math

import pytest

from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.predict.goodput import daly_interval_s, daly_wall_time_s, goodput, reliability, young_interval_s
from plait.workload.catalog import get_model

HOUR = 3600.0


def test_young_interval_by_hand() -> None:
    assert young_interval_s(60.0, 3 * HOUR) == pytest.approx(1138.42, abs=0.01)  # sqrt(2 x 60 x 10800)


def test_daly_interval_tends_to_young_for_cheap_checkpoints() -> None:
    for delta in (1.0, 10.0, 100.0):
        young, daly = young_interval_s(delta, 10 * HOUR), daly_interval_s(delta, 10 * HOUR)
        assert abs(daly - young) / young < 2 * math.sqrt(delta / (2 * 10 * HOUR)) + delta / young
    assert daly_interval_s(3 * HOUR, HOUR) == HOUR  # delta >= 2M: checkpoint once per MTBF (Daly 2006)


def test_daly_wall_time_limits_and_optimum() -> None:
    solve, delta = 1e6, 30.0
    # without failures only the checkpoints cost: T_w -> T_s (tau + delta) / tau
    assert daly_wall_time_s(solve, 600.0, delta, 0.0, 1e15) == pytest.approx(solve * 630.0 / 600.0, rel=1e-6)
    mtbf, restart = 3 * HOUR, 900.0
    best = daly_interval_s(delta, mtbf)
    at_best = daly_wall_time_s(solve, best, delta, restart, mtbf)
    for factor in (0.5, 0.8, 1.25, 2.0):
        assert at_best <= daly_wall_time_s(solve, best * factor, delta, restart, mtbf)


def test_packaged_rates_are_the_llama3_table() -> None:
    """Dubey et al. 2024, Table 5: 419 unexpected interruptions (148 faulty GPU, 72 HBM3) in 54 days on 16,384."""
    r = reliability()
    gpu_hours = 16384 * 54 * 24
    assert r.unexpected_per_gpu_hour * gpu_hours == pytest.approx(419)
    assert r.by_cause["faulty_gpu"] * gpu_hours == pytest.approx(148)
    assert r.by_cause["gpu_hbm3_memory"] * gpu_hours == pytest.approx(72)
    assert sum(r.by_cause.values()) == pytest.approx(r.unexpected_per_gpu_hour)
    assert r.planned_per_gpu_hour * gpu_hours == pytest.approx(47)


def test_goodput_of_a_large_run_falls_with_its_size() -> None:
    model, cluster = get_model("llama3-70b"), get_cluster("dgx-h100-ib")
    values = []
    for dp in (16, 128, 1024):
        est = estimate(model, cluster, Plan(tp=8, sp=True, dp_shard=dp, sharding="zero1", global_batch=2 * dp),
                       engine=get_engine())
        g = goodput(est)
        assert g.mtbf_s == pytest.approx(54 * 24 * 16384 / 419 / (8 * dp) * HOUR)
        assert 0.0 < g.goodput < 1.0 and g.restart_s > g.checkpoint_s > 0
        values.append(g.goodput)
    assert values == sorted(values, reverse=True)


def test_replicated_state_is_written_once() -> None:
    """DCP writes a replicated tensor from one rank: with DDP over 8 replicas each GPU writes an eighth of its
    weights and optimizer; ZeRO-3 over all 8 already holds one copy; offloaded state is written all the same."""
    from plait.predict.goodput import checkpoint_bytes_per_gpu

    model, cluster = get_model("llama3-8b"), get_cluster("dgx-h100-ib")
    ddp = estimate(model, cluster, Plan(dp_replicate=8, global_batch=64), engine=get_engine())
    zero3 = estimate(model, cluster, Plan(dp_shard=8, sharding="zero3", global_batch=64), engine=get_engine())
    assert checkpoint_bytes_per_gpu(ddp) == pytest.approx((ddp.memory.weights_bytes + ddp.memory.optimizer_bytes) / 8)
    assert checkpoint_bytes_per_gpu(zero3) == zero3.memory.weights_bytes + zero3.memory.optimizer_bytes
    assert checkpoint_bytes_per_gpu(ddp) == pytest.approx(checkpoint_bytes_per_gpu(zero3), rel=1e-3)
    offloaded = estimate(model, cluster, Plan(dp_shard=8, sharding="zero3", global_batch=64, offload_optimizer=True,
                                              offload_params=True), engine=get_engine())
    assert offloaded.memory.weights_bytes == offloaded.memory.optimizer_bytes == 0
    assert checkpoint_bytes_per_gpu(offloaded) == checkpoint_bytes_per_gpu(zero3)
    assert 0.0 < goodput(offloaded).goodput < 1.0
