"""PyTorch context_parallel's bookkeeping and K/V exchange, walked through rank by rank for cp = 2.

Expected bytes follow torch/distributed/tensor/experimental/_attention.py op by op (each op reads its inputs
and writes its output; fp32 = 4 bytes, bf16 = 2), written out per rank here rather than taken from the code
under test. With load balancing, rank 0's second step uses the second half of its queries (``partial``),
rank 1's second step the first half of the keys.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from plait.cost.framework import Framework
from plait.cost.layer import cp_merge_bytes
from plait.cost.setup import Setup
from plait.hardware.cluster import Cluster
from plait.plan.plan import Plan
from plait.workload.catalog import get_model


def _setup(cluster: Cluster, **framework: object) -> Setup:
    model = replace(get_model("llama3-8b"), num_layers=1)
    plan = Plan(cp=2, micro_batch=1, global_batch=1, seq_len=4096)
    return Setup(model=model, cluster=cluster, plan=plan, framework=Framework(**framework))  # type: ignore[arg-type]


def test_two_rank_merge_traffic(toy_cluster: Cluster) -> None:
    setup = _setup(toy_cluster, cp_kv_exchange="allgather")
    tokens = 2048
    o = q = tokens * 32 * 128
    kv = tokens * 8 * (128 + 128)
    # forward. rank 0: cast block 0 to fp32 (6 O); step 1 is partial: cast half (3 O), merge math on half
    # (sub, mul, sub: 12 + 8 + 12 = 32 per element -> 16 O), re-concatenate the whole output (8 O); cast back
    # (6 O). rank 1: 6 O, then a full step (6 O + 32 O), cast back 6 O. Both concatenate K, V once (4 KV).
    fwd = ((6 + 3 + 16 + 8 + 6) * o + (6 + 6 + 32 + 6) * o) / 2 + 4 * kv
    # backward. Both: fp32 zeros (4 Q, 4 KV), step 0 adds dq and dK/dV (10 Q, 10 KV), sends fp32 dK/dV (8 KV),
    # concatenates K, V (4 KV), casts back (6 Q, 6 KV). Step 1: rank 0 adds dq into half and re-concatenates
    # (5 + 8 Q) and dK/dV in full (10 KV); rank 1 adds dq in full (10 Q) and dK/dV into half (5 + 8 KV);
    # both send dK/dV again (8 KV).
    common_q, common_kv = 4 + 10 + 6, 4 + 10 + 8 + 4 + 6 + 8
    bwd = ((common_q + 13) * q + (common_kv + 10) * kv + (common_q + 10) * q + (common_kv + 13) * kv) / 2
    assert cp_merge_bytes(setup) == pytest.approx((fwd, bwd), rel=1e-12)


def test_other_implementations_and_no_cp_have_no_merge_traffic(toy_cluster: Cluster) -> None:
    assert cp_merge_bytes(_setup(toy_cluster)) == (0.0, 0.0)
    setup = _setup(toy_cluster, cp_kv_exchange="allgather")
    assert cp_merge_bytes(replace(setup, plan=replace(setup.plan, cp=1))) == (0.0, 0.0)


def test_repeated_kv_heads_grow_the_exchange(toy_cluster: Cluster) -> None:
    """Copying 8 K/V heads out to 32 before the attention call makes the K/V the exchange moves 4x larger."""
    grouped = cp_merge_bytes(_setup(toy_cluster, cp_kv_exchange="allgather"))
    repeated = cp_merge_bytes(_setup(toy_cluster, cp_kv_exchange="allgather", kv_repeat=True))
    kv_grouped = 2048 * 8 * 256
    assert repeated[0] - grouped[0] == pytest.approx(4 * (4 * kv_grouped - kv_grouped), rel=1e-12)


def test_allgather_hides_behind_the_first_block_and_gradients_pass_in_fp32(toy_cluster: Cluster) -> None:
    """Toy NVLink 100 GB/s, no latency, no contention. The bf16 K/V block of a rank is 2048 tokens x 8 heads x
    256 x 2 bytes; gathering 2 blocks moves one block per rank. The backward gathers again and passes fp32
    K/V gradients (twice the block) once per step; all but the last pass hide behind later blocks."""
    from plait.cost.layer import _cp_exchange_s

    setup = _setup(toy_cluster, cp_kv_exchange="allgather")
    block = 2048 * 8 * 256 * 2
    gather, grad_pass = block / 100e9, 2 * block / 100e9
    assert _cp_exchange_s(setup, 0.0, 0.0) == pytest.approx((gather, gather + 2 * grad_pass), rel=1e-12)
    assert _cp_exchange_s(setup, 1.0, 1.0) == pytest.approx((0.0, grad_pass), rel=1e-12)
