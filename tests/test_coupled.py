"""FSDP2 groups with different micro-batch counts, coupled at their per-block collectives
(:mod:`plait.predict.coupled`): a hand-computed case, the uncoupled step where nothing differs, and the mixed
prediction of an uneven ZeRO-2 split at least that of its slowest group."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plait.predict.coupled import coupled_step_s

ROOT = Path(__file__).parents[1]


def test_a_fast_rank_with_three_micro_batches_and_a_slow_one_with_one_by_hand() -> None:
    # Rank 0: forward 1, backward 2, 3 micro-batches; rank 1 three times slower, 1 micro-batch; 4 blocks.
    # First forward at rank 1's pace: 3. Rank 0 then runs alone 2 x (1 + 2) = 6 and starts its last backward at 9;
    # rank 1 starts its backward at 3. The first block of the last backward ends at max(9 + 2/4, 3 + 6/4) = 9.5,
    # the other three at rank 1's pace, 3 x 6/4 = 4.5: 14, then the longer remainder 0.5.
    assert coupled_step_s((1.0, 3.0), (2.0, 6.0), (3, 1), (0.5, 0.2), 4, regathered=False) == pytest.approx(14.5)
    # Uncoupled, each rank's own work would be 3 x 3 = 9 and 1 x 9 = 9: the coupling costs 5 more. ZeRO-3 re-gathers
    # before the last backward, so rank 1 computes none of it before rank 0 arrives at 9: 9 + 6 + 0.5.
    assert coupled_step_s((1.0, 3.0), (2.0, 6.0), (3, 1), (0.5, 0.2), 4, regathered=True) == pytest.approx(15.5)


@given(st.floats(0.01, 10), st.floats(0.01, 10), st.integers(1, 16), st.floats(0, 1), st.integers(1, 8),
       st.integers(1, 80))
@settings(max_examples=100, deadline=None)
def test_equal_groups_take_the_uncoupled_step(f: float, b: float, m: int, rest: float, groups: int,
                                              blocks: int) -> None:
    for regathered in (False, True):
        step = coupled_step_s((f,) * groups, (b,) * groups, (m,) * groups, (rest,) * groups, blocks, regathered)
        assert step == pytest.approx(m * (f + b) + rest, rel=1e-12)


def test_an_uneven_zero2_split_is_predicted_coupled() -> None:
    """Rank 1 slowed 3x with a third of rank 0's sequences: each rank's own work is about equal, but under FSDP2
    the step is longer (the coupling); under DDP (one all-reduce at the end) it is the slowest rank's."""
    from plait.hardware.catalog import load_cluster_file
    from plait.plan.plan import Plan
    from plait.run.uneven import Uneven
    from plait.run.uneven_prediction import predict_uneven
    from plait.workload.catalog import resolve_model

    model = resolve_model(str(ROOT / "examples" / "small-model.toml"))
    cluster = load_cluster_file(ROOT / "examples" / "cpu-node.toml")  # this machine, calibrated
    uneven = Uneven(slowdown=(1.0, 3.0), batch_split=(12, 4))
    zero2 = Plan(dp_shard=2, sharding="zero2", global_batch=16, micro_batch=4)
    sharded = predict_uneven(model, cluster, zero2, uneven)
    ddp = predict_uneven(model, cluster, replace(zero2, dp_shard=1, dp_replicate=2, sharding="none"), uneven)
    assert sharded is not None and ddp is not None
    assert ddp.step_time_s == pytest.approx(max(g.busy_s for g in ddp.groups))
    assert sharded.step_time_s > 1.3 * max(g.busy_s for g in sharded.groups)
    even = predict_uneven(model, cluster, zero2, Uneven(slowdown=(1.0, 3.0)))
    assert even is not None and even.step_time_s == pytest.approx(max(g.busy_s for g in even.groups))
