"""TP traffic outside the layers: the embedding and output projection, the loss, and SP's norm gradients.

Expected values are written from the ring-collective formulas on the toy cluster (no latency, every
efficiency 1, 100 GB/s per GPU inside a node): for 2 ranks a ring all-gather or reduce-scatter of a
buffer of ``N`` bytes moves ``N/2`` per rank and an all-reduce ``N`` (Patarasuk & Yuan 2009).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from plait.engine.catalog import get_engine
from plait.engine.facts import EngineFacts
from plait.hardware.cluster import Cluster
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.workload.catalog import get_model

BW = 100e9  # toy NVLink bytes/s per GPU


def _plan(**kw: object) -> Plan:
    return Plan(**{"tp": 2, "sp": True, "micro_batch": 1, "global_batch": 1, **kw})  # type: ignore[arg-type]


def test_sequence_parallel_tp_traffic_of_a_step(toy_cluster: Cluster) -> None:
    """Per layer and pass: two all-gathers and two reduce-scatters of the hidden states; at the ends: the
    embedding's reduce-scatter (forward) and all-gather (backward), the output's all-gather and
    reduce-scatter, and three fp32 all-reduces of one value per token for the vocab-parallel loss."""
    model = replace(get_model("llama3-8b"), num_layers=2)
    tokens = model.seq_len
    hidden = 2 * tokens * model.hidden_size  # bf16 hidden states of one micro-batch
    est = estimate(model, toy_cluster, _plan(), engine=get_engine())
    layers = model.num_layers * 2 * 2 * (hidden / 2 + hidden / 2) / BW
    ends = 4 * (hidden / 2) / BW + 3 * (4 * tokens) / BW
    assert est.time.tp_comm_s == pytest.approx(layers + ends, rel=1e-9)


def test_gathered_logits_cost_grows_with_the_vocabulary(toy_cluster: Cluster) -> None:
    """A runtime that all-gathers the logits (plait run) pays for the vocabulary; the vocab-parallel loss does not."""
    small = replace(get_model("llama3-8b"), num_layers=2)
    large = replace(small, vocab_size=2 * small.vocab_size)
    gathered = EngineFacts(tp_loss="gathered")
    tp = {name: [estimate(m, toy_cluster, _plan(), engine=replace(get_engine(), framework=fw)).time.tp_comm_s
                 for m in (small, large)]
          for name, fw in (("parallel", EngineFacts()), ("gathered", gathered))}
    assert tp["parallel"][0] == pytest.approx(tp["parallel"][1], rel=1e-12)
    logits = 2 * small.seq_len * small.vocab_size  # bf16 logits of one micro-batch
    assert tp["gathered"][1] - tp["gathered"][0] == pytest.approx(logits / 2 / BW, rel=1e-9)


def test_sequence_parallel_reduces_norm_gradients_once_per_step(toy_cluster: Cluster) -> None:
    """Replicated norm weights see a slice of the sequence: one all-reduce of their gradients per step
    (2 norms per layer and the final norm), however many micro-batches."""
    model = replace(get_model("llama3-8b"), num_layers=2)
    norms = (2 * model.num_layers + 1) * model.hidden_size
    for micro_batches in (1, 4):
        sp = estimate(model, toy_cluster, _plan(global_batch=micro_batches), engine=get_engine())
        no_sp = estimate(model, toy_cluster, _plan(sp=False, global_batch=micro_batches), engine=get_engine())
        grad_bytes = 4  # fp32 gradients (the default reduce dtype)
        assert sp.time.optimizer_s - no_sp.time.optimizer_s == pytest.approx(grad_bytes * norms / BW, rel=1e-9)


def test_async_tp_hides_at_most_what_the_decomposed_gemms_can() -> None:
    """Regression: tp_comm_overlap used to hide all TP traffic behind the whole GEMM time. Decomposed
    (async) TP overlaps the other tp - 1 chunks only, and pays for running tp smaller GEMMs (Wang et al. 2023)."""
    from plait.cost.compute import gemms_fwd_bwd_s
    from plait.cost.flops import Gemm, layer_gemms
    from plait.cost.layer import layer_cost
    from plait.cost.setup import Setup
    from plait.hardware.catalog import cluster_from_mapping
    from tests.conftest import toy_cluster_mapping

    cluster = cluster_from_mapping(toy_cluster_mapping(), "toy")
    model = get_model("llama3-8b")
    base = Plan(tp=8, sp=True, micro_batch=1, global_batch=1, seq_len=8192)
    exposed, overlapped = (Setup(model=model, cluster=cluster, plan=replace(base, tp_comm_overlap=flag),
                                 framework=EngineFacts()) for flag in (False, True))
    comm, hidden = layer_cost(exposed, False).tp_fwd_s, layer_cost(overlapped, False).tp_fwd_s
    gemms = layer_gemms(overlapped, False)
    gemm_fwd, _ = gemms_fwd_bwd_s(gemms, overlapped)
    split_fwd, _ = gemms_fwd_bwd_s([Gemm(g.m // 8, g.n, g.k, g.count * 8) for g in gemms], overlapped)
    # toy cluster: comm_overlap 1 (no contention), so the exposed part is what 7/8 of the GEMMs cannot cover
    assert hidden == pytest.approx(max(0.0, comm - gemm_fwd * 7 / 8) + max(0.0, split_fwd - gemm_fwd), rel=1e-12)
    assert 0 < hidden < comm
