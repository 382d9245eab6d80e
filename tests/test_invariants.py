"""Layer (c): invariants of the cost model as property tests."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plait.cost.memory import shard_groups
from plait.engine.catalog import get_engine
from plait.hardware.catalog import cluster_from_mapping, get_cluster
from plait.plan.columns import PlanColumns
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.workload.catalog import get_model
from tests.conftest import toy_cluster_mapping

MODELS = ["llama3-8b", "megatron-gpt-7.5b", "mpt-13b", "mixtral-8x7b", "qwen3-8b"]
H100 = get_cluster("dgx-h100-ib")


@settings(max_examples=40, deadline=None)
@given(model=st.sampled_from(MODELS), small=st.sampled_from([1, 2, 4]), recompute=st.sampled_from(["none", "full"]),
       sharding=st.sampled_from(["none", "zero1", "zero3"]))
def test_more_tp_never_raises_weight_memory(model: str, small: int, recompute: str, sharding: str) -> None:
    """At fixed data-parallel degree (more GPUs), doubling tp never raises per-GPU weights."""
    spec = get_model(model)
    weights = []
    dp = 4
    for tp in (small, small * 2):
        plan = Plan(tp=tp, sp=tp > 1, dp_shard=dp if sharding != "none" else 1,
                    dp_replicate=1 if sharding != "none" else dp, sharding=sharding,  # type: ignore[arg-type]
                    recompute=recompute, global_batch=dp * 2)  # type: ignore[arg-type]
        weights.append(estimate(spec, H100, plan, engine=get_engine()).memory.weights_bytes)
    assert weights[1] <= weights[0]


@settings(max_examples=30, deadline=None)
@given(model=st.sampled_from(MODELS), shard=st.sampled_from([2, 4, 8, 16, 64]),
       sharding=st.sampled_from(["zero1", "zero2", "zero3"]))
def test_shards_sum_to_the_unsharded_state(model: str, shard: int, sharding: str) -> None:
    """Summed over the sharding group, each sharded state equals the replicated one."""
    spec = get_model(model)

    def mem(plan: Plan):
        return estimate(spec, H100, plan, engine=get_engine()).memory

    full = mem(Plan(dp_replicate=shard, global_batch=shard))
    sharded_plan = Plan(dp_shard=shard, sharding=sharding, global_batch=shard)  # type: ignore[arg-type]
    part = mem(sharded_plan)
    group, _ = shard_groups(PlanColumns.from_plans([sharded_plan]))
    assert int(group[0]) == shard
    assert part.optimizer_bytes * shard == pytest.approx(full.optimizer_bytes)
    if sharding in ("zero2", "zero3"):
        assert part.gradients_bytes * shard == pytest.approx(full.gradients_bytes)
    if sharding == "zero3":
        assert part.weights_bytes * shard == pytest.approx(full.weights_bytes)


@settings(max_examples=25, deadline=None)
@given(model=st.sampled_from(MODELS), micro_batch=st.sampled_from([1, 2]), steps=st.sampled_from([1, 4]),
       recompute=st.sampled_from(["none", "selective", "full"]))
def test_all_degrees_one_is_the_single_gpu_prediction(model: str, micro_batch: int, steps: int, recompute: str) -> None:
    """With every degree 1 nothing crosses a network: the network cannot change the answer."""
    spec = get_model(model)
    plan = Plan(micro_batch=micro_batch, global_batch=micro_batch * steps, recompute=recompute)  # type: ignore[arg-type]
    fast = cluster_from_mapping(toy_cluster_mapping(nvlink_gb_per_s=1000.0, network_gb_per_s=1000.0), "fast")
    slow = cluster_from_mapping(toy_cluster_mapping(nvlink_gb_per_s=1.0, network_gb_per_s=0.1), "slow")
    a, b = estimate(spec, fast, plan, engine=get_engine()), estimate(spec, slow, plan, engine=get_engine())
    assert a.step_time_s == pytest.approx(b.step_time_s, rel=1e-12)
    assert a.memory.total_bytes == b.memory.total_bytes
    comm = ("tp_comm", "cp_comm", "ep_comm", "pp_p2p", "pp_bubble", "fsdp_comm", "dp_comm")
    assert all(v == 0.0 for k, v in a.time.items() if k in comm)


PLANS = [
    Plan(tp=8, sp=True, dp_replicate=4, global_batch=64),
    Plan(tp=4, pp=4, vpp=2, schedule="interleaved", dp_replicate=2, sharding="none", global_batch=64),
    Plan(dp_shard=32, sharding="zero3", global_batch=64, recompute="full"),
    Plan(tp=2, cp=2, dp_shard=8, sharding="zero1", global_batch=64),
    Plan(tp=8, pp=2, dp_shard=2, sharding="zero2", global_batch=64),
]


@settings(max_examples=40, deadline=None)
@given(plan=st.sampled_from(PLANS), model=st.sampled_from(["llama3-8b", "megatron-gpt-7.5b"]),
       nv=st.floats(10, 1000), net=st.floats(1, 100), faster=st.floats(1.0, 10.0))
def test_faster_links_never_raise_step_time(plan: Plan, model: str, nv: float, net: float, faster: float) -> None:
    spec = get_model(model)
    slow = cluster_from_mapping(toy_cluster_mapping(nv, net), "slow")
    fast = cluster_from_mapping(toy_cluster_mapping(nv * faster, net * faster), "fast")
    fast_s, slow_s = (estimate(spec, c, plan, engine=get_engine()).step_time_s for c in (fast, slow))
    assert fast_s <= slow_s * (1 + 1e-12)


@settings(max_examples=20, deadline=None)
@given(plan=st.sampled_from(PLANS), model=st.sampled_from(["llama3-8b", "megatron-gpt-7.5b"]))
def test_breakdown_sums_to_step_and_metrics_agree(plan: Plan, model: str) -> None:
    est = estimate(get_model(model), H100, plan, engine=get_engine())
    assert sum(v for _, v in est.time.items()) == pytest.approx(est.step_time_s)
    assert est.tokens_per_s == pytest.approx(plan.global_batch * est.plan.seq_len / est.step_time_s)
    assert 0 < est.mfu <= est.hfu
    assert est.cost_usd(1e12) == pytest.approx(est.gpu_hours(1e12) * H100.price_per_gpu_hour_usd)


def test_recompute_trades_time_for_memory() -> None:
    spec, plan = get_model("llama3-8b"), Plan(dp_shard=8, sharding="zero3", global_batch=8)
    none = estimate(spec, H100, plan, engine=get_engine())
    full = estimate(spec, H100, replace(plan, recompute="full"), engine=get_engine())
    assert full.step_time_s > none.step_time_s
    assert full.memory.activations_bytes < none.memory.activations_bytes
