"""Horovod's Tensor Fusion (plait.workloads.traced.tensor_fusion): hand-computed exposed seconds after the backward,
from the cycle rule of horovod/common/operations.cc (RunLoopOnce) and the fusion steps of docs/tensor-fusion.rst."""

from __future__ import annotations

import pytest

from plait.cost.compute import memory_bytes_per_s
from plait.cost.links import collective_s
from plait.hardware.catalog import get_cluster
from plait.plan.plan import Plan
from plait.workloads.traced.tensor_fusion import HOROVOD_0_20, HOROVOD_0_21, TensorFusion

CYCLE_S, MB = 5e-3, 2.0**20
FUSION = TensorFusion(cycle_s=CYCLE_S, threshold_bytes=64 * MB, source="test: Horovod 0.20 defaults")
PLAN = Plan(dp_replicate=8, sharding="none", micro_batch=4, global_batch=32, precision="fp16")


def _reduce_s(num_bytes: float) -> float:
    return float(collective_s(get_cluster("dgx1-v100"), "all_reduce", 8, 1, num_bytes))


def test_the_last_gradient_waits_half_a_cycle_on_average_then_is_reduced_alone() -> None:
    # ready at the backward's end, a whole number of cycles in: the next cycle comes p after it, p uniform in
    # [0, cycle) -> mean wait cycle / 2; one tensor needs no copy into the fusion buffer
    end_s = 20 * CYCLE_S
    exposed = FUSION.exposed_s(get_cluster("dgx1-v100"), PLAN, [(end_s, 10 * MB)], end_s)
    assert exposed == pytest.approx(CYCLE_S / 2 + _reduce_s(10 * MB))


def test_gradients_ready_together_are_copied_into_one_buffer_and_reduced_once() -> None:
    cluster, end_s = get_cluster("dgx1-v100"), 20 * CYCLE_S
    copies_s = 4 * (20 * MB) / memory_bytes_per_s(cluster.accelerator)  # read and write, in and out
    exposed = FUSION.exposed_s(cluster, PLAN, [(end_s, 10 * MB), (end_s, 10 * MB)], end_s)
    assert exposed == pytest.approx(CYCLE_S / 2 + copies_s + _reduce_s(20 * MB))


def test_a_cycle_past_the_threshold_reduces_one_buffer_after_another() -> None:
    # 40 + 40 MB exceeds 64 MB: three buffers of one gradient each, back to back on one stream
    end_s = 20 * CYCLE_S
    exposed = FUSION.exposed_s(get_cluster("dgx1-v100"), PLAN, [(end_s, 40 * MB)] * 3, end_s)
    assert exposed == pytest.approx(CYCLE_S / 2 + 3 * _reduce_s(40 * MB))


def test_gradients_reduced_during_the_backward_leave_nothing_exposed_but_the_last() -> None:
    early = [(k * CYCLE_S / 2, 1 * MB) for k in range(1, 20)]  # reduced long before the end
    end_s = 40 * CYCLE_S
    alone = FUSION.exposed_s(get_cluster("dgx1-v100"), PLAN, [(end_s, 1 * MB)], end_s)
    assert FUSION.exposed_s(get_cluster("dgx1-v100"), PLAN, [*early, (end_s, 1 * MB)], end_s) == pytest.approx(alone)


def test_one_replica_reduces_nothing_and_the_defaults_follow_horovod_2468() -> None:
    single = Plan(dp_replicate=1, sharding="none", micro_batch=4, global_batch=4, precision="fp16")
    assert FUSION.exposed_s(get_cluster("dgx1-v100"), single, [(0.1, MB)], 0.1) == 0.0
    # horovod/horovod#2468: 5 ms and 64 MB before 0.21.0, 1 ms and 128 MB from it
    assert (HOROVOD_0_20.cycle_s, HOROVOD_0_20.threshold_bytes) == (5e-3, 64 * MB)
    assert (HOROVOD_0_21.cycle_s, HOROVOD_0_21.threshold_bytes) == (1e-3, 128 * MB)
