"""Tensor parallelism's collectives of a transformer layer and of the model's two ends, for one micro-batch on one
rank (:mod:`plait.cost.layer` adds them to a layer's time, :mod:`plait.cost.inner` the ends).

Per layer and pass, Megatron tensor parallelism runs two all-reduces of the ``b s h`` hidden states — two
all-gathers and two reduce-scatters with sequence parallelism, the same volume (Korthikanti et al. 2022, Sec. 4.2.2,
Fig. 5); each collective runs over the TP group on the tier it crosses (:func:`plait.cost.links.collective_s`).
"""

from __future__ import annotations

from plait.cost.links import collective_s
from plait.cost.overlap import hidden_remainder
from plait.cost.setup import Setup
from plait.plan.ops import SCALAR


def tp_pass_s(setup: Setup, gemm_s: float, chunking_s: float, comm_s: float | None = None) -> float:
    """Exposed TP/SP communication of one pass (two collectives on the hidden states).

    With ``tp_comm_overlap`` the collectives are decomposed with the GEMMs they feed or follow (Wang et al. 2023,
    "Overlap Communication with Dependent Computation via Decomposition in Large Deep Learning Models", ASPLOS,
    Sec. 3; PyTorch's async TP, ``_fused_all_gather_matmul`` / ``_fused_matmul_reduce_scatter`` in
    torch/distributed/_symmetric_memory): the GEMM runs as ``tp`` chunks of ``1/tp`` of the tokens, each chunk
    overlapping the transfer of the next shard, so the chunk computed on the local shard hides nothing and what
    the other ``tp - 1`` chunks cannot hide stays exposed, plus the contention of the overlap
    (:func:`plait.cost.overlap.hidden_remainder`) and ``chunking_s``, the extra time of ``tp`` smaller GEMMs."""
    plan = setup.plan
    if plan.tp == 1:
        return 0.0
    comm = tp_comm_s(setup) if comm_s is None else comm_s
    if not plan.tp_comm_overlap:
        return comm
    hideable = gemm_s * (plan.tp - 1) / plan.tp
    return float(hidden_remainder(comm, hideable, setup.comm_overlap, SCALAR)) + chunking_s


def _tp_collective_s(setup: Setup, kind: str, num_bytes: float) -> float:
    """Collective ``kind`` of ``num_bytes`` over the TP group, kept on the cluster by message
    (:func:`plait.cost.links.collective_s`): a layer's passes and the model's two ends send the same messages."""
    return collective_s(setup.cluster, kind, setup.plan.tp, 1, num_bytes)  # type: ignore[no-any-return]


def tp_comm_s(setup: Setup) -> float:
    """The two collectives of one pass on the hidden states, before any overlap (the same in both passes)."""
    hidden = setup.tokens * setup.model.hidden_size
    gathered, reduced = setup.residual_bytes * hidden, setup.act_bytes * hidden  # norm outputs; GEMM partial sums
    one = (_tp_collective_s(setup, "all_gather", gathered) + _tp_collective_s(setup, "reduce_scatter", reduced)
           if setup.plan.sp else _tp_collective_s(setup, "all_reduce", reduced))
    return 2 * one


def edge_tp_s(setup: Setup) -> tuple[float, float, float, float]:
    """TP collectives at the two ends of the model for one micro-batch: (first-stage forward, first-stage
    backward, last-stage forward, last-stage backward).

    The vocab-parallel embedding sums its partial lookups into the hidden states: a reduce-scatter into
    the sequence-parallel stream (an all-reduce without SP) in the forward, and with SP an all-gather of
    their gradient in the backward. The column-parallel output projection gathers the final norm's output
    (SP) in the forward and reduce-scatters (all-reduces without SP) its input gradient in the backward;
    these are the ``g``/``g-bar`` pairs of Korthikanti et al. 2022, Sec. 4.2.2, at the model's ends
    (Megatron-LM VocabParallelEmbedding and the output ColumnParallelLinear). The loss then costs three
    all-reduces of one fp32 value per token (vocab-parallel cross-entropy) or an all-gather of the logits
    (:attr:`EngineFacts.tp_loss`)."""
    plan = setup.plan
    if plan.tp == 1:
        return 0.0, 0.0, 0.0, 0.0
    stream = setup.residual_bytes * setup.tokens * setup.model.hidden_size
    if plan.sp:
        scatter = _tp_collective_s(setup, "reduce_scatter", stream)
        gather = _tp_collective_s(setup, "all_gather", stream)
        first_fwd, first_bwd, last_fwd, last_bwd = scatter, gather, gather, scatter
    else:
        first_fwd, first_bwd = _tp_collective_s(setup, "all_reduce", stream), 0.0
        last_fwd, last_bwd = 0.0, first_fwd
    if setup.framework.tp_loss == "gathered":
        loss = _tp_collective_s(setup, "all_gather", setup.act_bytes * setup.tokens * setup.model.vocab_size)
    else:
        loss = 3 * _tp_collective_s(setup, "all_reduce", 4 * setup.tokens)
    return first_fwd, first_bwd, last_fwd + loss, last_bwd
