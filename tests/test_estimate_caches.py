"""What one estimate keeps for the next (the per-layer quantities by their inner fields, the per-layer FSDP times by
theirs, a stage's pass time, parameters, memory and data-parallel sync by theirs, a checked plan, the engine's verdict
on it, collective times by message, a pipeline's per-rank costs by its plan and its simulated end times by those
costs) never changes an estimate: plans that differ only where the keys
say nothing is read, estimated one after another, equal each estimated with every cache emptied, to the bit."""

from __future__ import annotations

import itertools

import pytest

from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.workload.catalog import get_model
from tests.conftest import empty_kept

OUTER = [dict(dp_shard=8, sharding="zero3"), dict(dp_shard=8, sharding="zero2"),
         dict(pp=2, dp_shard=4, sharding="zero3"), dict(pp=2, dp_shard=4, sharding="zero1"),
         dict(pp=2, dp_replicate=4, sharding="none"),
         dict(pp=4, dp_shard=2, sharding="zero1", schedule="zb-h1"),
         dict(pp=4, vpp=2, schedule="interleaved", dp_replicate=2, sharding="zero2", global_batch=256),
         dict(dp_replicate=2, dp_shard=4, sharding="zero3", global_batch=512), dict(dp_shard=4, sharding="zero3")]
"""Plans apart in the fields the per-layer quantities' key leaves out (and in whether FSDP wraps the model), pairs of
them apart in one field the FSDP times read (the sharding, the shard group)."""


def _fingerprint(model_name: str, plan: Plan, engine: str) -> str:
    est = estimate(get_model(model_name), get_cluster("dgx-h100-ib"), plan, engine=get_engine(engine))
    return repr((est.time, est.memory, est.step_time_interval_s, est.warnings))


def _empty() -> None:
    empty_kept(get_cluster("dgx-h100-ib"))


@pytest.mark.parametrize(("model_name", "engine"), [("llama3-8b", "torchtitan"), ("llama3-8b", "plait"),
                                                    ("mixtral-8x7b", "torchtitan")])
def test_kept_quantities_change_no_estimate(model_name: str, engine: str) -> None:
    plans = [Plan(tp=tp, micro_batch=mb, recompute=rc, **{"global_batch": 128, **outer})
             for outer, tp, mb, rc in itertools.product(OUTER, (1, 2), (1, 2), ("none", "full"))]
    _empty()
    warm = {}
    for plan in plans:
        try:
            warm[plan] = _fingerprint(model_name, plan, engine)
        except ConfigError:
            continue
    assert len(warm) >= 40, "most of the plans are valid"
    for plan, seen in warm.items():
        _empty()
        assert _fingerprint(model_name, plan, engine) == seen, plan.describe()
