"""PyTorch context_parallel's bookkeeping and K/V exchange, walked through its code step by step.

``_walk`` follows torch/distributed/tensor/experimental/_attention.py (``_templated_ring_attention``, its
backward, ``_SDPAMerger``, ``_partial_update``) loop iteration by loop iteration for one rank, charging each op
its reads and writes (fp32 = 4 bytes, bf16 = 2); the closed form under test must match the slowest rank. With
load balancing, step ``i <= rank`` uses the whole local query (and, backward, the first half of the keys),
step ``i > rank`` the second half of the query (``partial``).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from plait.cost.context_parallel import cp_exchange_s, cp_merge_bytes
from plait.cost.setup import Setup
from plait.engine.facts import EngineFacts
from plait.hardware.catalog import cluster_from_mapping
from plait.hardware.cluster import Cluster
from plait.plan.plan import Plan
from plait.workload.catalog import get_model
from tests.conftest import toy_cluster_mapping


def _setup(cluster: Cluster, cp: int = 2, **framework: object) -> Setup:
    model = replace(get_model("llama3-8b"), num_layers=1)
    plan = Plan(cp=cp, micro_batch=1, global_batch=1, seq_len=4096)
    return Setup(model=model, cluster=cluster, plan=plan, framework=EngineFacts(**framework))  # type: ignore[arg-type]


def _walk(cp: int, rank: int, o: float, q: float, kv: float) -> tuple[float, float]:
    fwd = 0.0
    for i in range(cp):
        if i < cp - 1:
            fwd += (2 + 2) * kv  # torch.cat([key.flatten(), value.flatten()]) before the exchange
        partial = i > rank and i > 0
        n = o / 2 if partial else o
        fwd += (2 + 4) * n  # merger.step: out.to(float32)
        if i > 0:
            fwd += (4 + 4 + 4) * n + (4 + 4) * n + (4 + 4 + 4) * n  # out - out_b; sigmoid(...) * that; out - that
            if partial:
                fwd += (4 + 4) * o  # _partial_update: torch.cat of the whole output
    fwd += (4 + 2) * o  # results(): back to bf16
    bwd = 4 * q + 4 * kv  # fp32 zeros_like for the three gradients
    for i in range(cp):
        if i != cp - 1:
            bwd += (2 + 2) * kv  # torch.cat of K and V for the next rank
        if i == 0 or i > rank:
            bwd += (4 + 2 + 4) * kv  # grad_key += grad_key_ (and value)
        else:
            bwd += (4 + 2 + 4) * kv / 2 + (4 + 4) * kv  # _partial_update(add=True) on the first half, then cat
        bwd += (4 + 4) * kv  # torch.cat of the fp32 K/V gradients for the next rank
        if i <= rank:
            bwd += (4 + 2 + 4) * q  # grad_query += grad_query_
        else:
            bwd += (4 + 2 + 4) * q / 2 + (4 + 4) * q  # _partial_update(add=True) on the second half, then cat
    bwd += (4 + 2) * q + (4 + 2) * kv  # casts back to bf16
    return fwd, bwd


@pytest.mark.parametrize("cp", [2, 4, 8])
@pytest.mark.parametrize("kv_repeat", [False, True])
def test_merge_traffic_is_the_slowest_ranks(toy_cluster: Cluster, cp: int, kv_repeat: bool) -> None:
    setup = _setup(toy_cluster, cp=cp, cp_kv_exchange="allgather", kv_repeat=kv_repeat)
    tokens = 4096 // cp
    o = q = tokens * 32 * 128
    kv = tokens * (32 if kv_repeat else 8) * (128 + 128)
    ranks = [_walk(cp, r, o, q, kv) for r in range(cp)]
    expected = (max(f for f, _ in ranks), max(b for _, b in ranks))
    assert cp_merge_bytes(setup) == pytest.approx(expected, rel=1e-12)


def test_other_implementations_and_no_cp_have_no_merge_traffic(toy_cluster: Cluster) -> None:
    assert cp_merge_bytes(_setup(toy_cluster)) == (0.0, 0.0)
    setup = _setup(toy_cluster, cp_kv_exchange="allgather")
    assert cp_merge_bytes(replace(setup, plan=replace(setup.plan, cp=1))) == (0.0, 0.0)


def test_allgather_hides_behind_the_first_block_and_gradients_pass_in_fp32(toy_cluster: Cluster) -> None:
    """Toy NVLink 100 GB/s, no latency, no contention. The bf16 K/V block of a rank is 2048 tokens x 8 heads x
    256 x 2 bytes; gathering 2 blocks moves one block per rank. The backward gathers again and passes fp32
    K/V gradients (twice the block) once per step; all but the last pass hide behind later blocks."""
    setup = _setup(toy_cluster, cp_kv_exchange="allgather")
    block = 2048 * 8 * 256 * 2
    gather, grad_pass = block / 100e9, 2 * block / 100e9
    assert cp_exchange_s(setup, 0.0, 0.0) == pytest.approx((gather, gather + 2 * grad_pass), rel=1e-12)
    assert cp_exchange_s(setup, 1.0, 1.0) == pytest.approx((0.0, grad_pass), rel=1e-12)


def test_only_the_first_block_hides_the_gather_and_overlap_costs_contention() -> None:
    """With half the overlapped interval lost to contention, a forward whose attention core is as long as
    the gather (so its first of 2 blocks is half as long) exposes the uncovered half plus half the covered."""
    mapping = toy_cluster_mapping()
    mapping["accelerator"]["efficiency"]["comm_overlap"] = {"value": 0.5, "source": "assumed: test"}
    setup = _setup(cluster_from_mapping(mapping, "toy"), cp_kv_exchange="allgather")
    gather = 2048 * 8 * 256 * 2 / 100e9
    fwd, _ = cp_exchange_s(setup, gather, gather)
    assert fwd == pytest.approx(gather / 2 + 0.5 * gather / 2, rel=1e-12)
