"""Context parallelism inside one layer: the K/V exchange (or Ulysses' all-to-alls) and the bookkeeping around
the attention blocks.

Ring (Liu et al. 2023, "Ring Attention", Sec. 3; Megatron-LM/Transformer Engine): K/V blocks pass around the ring
behind the attention core. All-gather, as PyTorch's ``context_parallel`` runs it
(torch/distributed/tensor/experimental/_attention.py, read op by op): one K/V all-gather per pass, fp32 gradient
ring passes, and fp32 merges of the partial outputs and gradients.

LSS (Wang et al. 2023, "Ultra-Long Sequence Distributed Transformer", arXiv:2311.02382, abstract and Fig. 1(v)):
each rank computes the self-attention of its own segment's queries ("partial self-attention"); the keys and values
of all segments reach it in one fused communication, and no partial attention is ever aggregated: the output of
a segment stays on its rank. Gradients are averaged over the sequence- and data-parallel ranks in one step
("double gradient averaging"), which is what plait's data parallelism over dp x cp already does for every
flavour (:mod:`plait.run.context`). The paper's text beyond its abstract and figure caption was not at hand: the
exchange below (K and V side by side in one ring all-gather, its adjoint reduce-scatter backward) is plait's reading
of "fused communication", and its bytes and memory are derived from it, not taken from the paper's equations.
"""

from __future__ import annotations

from plait.cost import collectives as coll
from plait.cost.overlap import hidden_remainder
from plait.cost.setup import Setup
from plait.plan.ops import SCALAR


def cp_sent_bytes(setup: Setup) -> tuple[float, float]:
    """Bytes one rank sends its cp peers in one layer's attention for one micro-batch, forward and backward.

    With ``block`` one rank's K and V (``tokens * kv_heads * (qk + v head dims)`` activation elements):

    - ring (point-to-point, Liu et al. 2023, Sec. 3; plait/run/ring_attention.py): ``cp - 1`` block passes forward;
      backward ``cp - 1`` passes of K/V again and ``cp - 1`` of their gradients, summed as they travel;
    - all-gather (PyTorch ``context_parallel``): a ring all-gather of the blocks, ``cp - 1`` blocks, in each pass;
      backward also ``cp`` ring passes of the fp32 K/V gradients (``_templated_ring_attention_backward``);
    - Ulysses (Jacobs et al. 2023, Sec. 3.1; plait/run/ulysses.py): all-to-alls of Q, K, V and the output, each
      rank keeping ``1 / cp`` of each, forward and (their gradients) backward;
    - LSS (Wang et al. 2023; plait/run/lss.py): one fused all-gather of the K/V blocks forward, ``cp - 1``
      blocks sent in a ring all-gather (Patarasuk & Yuan 2009), and its adjoint backward, one reduce-scatter of
      the gathered K/V gradients, ``cp - 1`` blocks again; K/V are kept gathered, not sent again. Its block is
      one copy of each K/V head (:func:`lss_block_bytes`), even where the engine copies K/V out to the query heads.
    """
    plan, model = setup.plan, setup.model
    c = plan.cp
    if c == 1:
        return 0.0, 0.0
    kv = setup.attention_kv_heads * (model.qk_head_dim + model.v_head_dim)
    block = setup.act_bytes * setup.tokens * kv
    if plan.cp_attention == "ulysses":
        heads = model.num_heads // plan.tp
        moved = setup.act_bytes * setup.tokens * (heads * (model.qk_head_dim + model.v_head_dim) + kv) * (c - 1) / c
        return moved, moved
    if plan.cp_attention == "lss":
        own = lss_block_bytes(setup)
        return (c - 1) * own, (c - 1) * own
    if setup.framework.cp_kv_exchange == "allgather":
        return (c - 1) * block, (c - 1) * block + c * 4 / setup.act_bytes * block
    return (c - 1) * block, 2 * (c - 1) * block


def _ulysses_s(setup: Setup, link: coll.GroupLink) -> float:
    """One pass's four all-to-alls (Q, K, V, output), each in the critical path (Jacobs et al. 2023, Sec. 3.1)."""
    model, tokens, act = setup.model, setup.tokens, setup.act_bytes
    heads = setup.model.num_heads // setup.plan.tp
    query, out = act * tokens * heads * model.qk_head_dim, act * tokens * heads * model.v_head_dim
    key, value = (act * tokens * setup.attention_kv_heads * d for d in (model.qk_head_dim, model.v_head_dim))
    return sum(coll.all_to_all_s(b, link) for b in (query, key, value, out))


def cp_exchange_s(setup: Setup, core_fwd_s: float, core_bwd_s: float) -> tuple[float, float]:
    """Exposed forward and backward K/V exchange of one layer under context parallelism.

    Ring: ``cp - 1`` block passes hidden behind the attention core (gradients double the
    traffic in the backward), less the contention of the overlap. All-gather, as PyTorch's
    ``context_parallel`` does it (``_templated_ring_attention`` and its backward): the K/V of all ranks are
    gathered once, issued before the rank's own (first of ``cp``) attention block and awaited after it, in the
    forward and again in the backward; the backward then passes the fp32 K/V gradients one ring step per block
    (``all_to_all`` permute), each awaited after the next block's compute and the last after the loop.
    Ulysses: four all-to-alls per pass, none hidden (attention needs their results). LSS: one all-gather of all
    ranks' K/V forward (attention needs it) and one reduce-scatter of their gradients backward (the K/V projections'
    backward needs it), neither hidden; each is one collective for K and V together, so its latency is paid once
    (the fused communication of Wang et al. 2023).
    """
    plan, model = setup.plan, setup.model
    if plan.cp == 1:
        return 0.0, 0.0
    link = coll.group_link(setup.cluster, plan.cp, plan.tp)
    if plan.cp_attention == "ulysses":
        exposed = _ulysses_s(setup, link)
        return exposed, exposed
    if plan.cp_attention == "lss":
        gathered = lss_block_bytes(setup) * plan.cp
        return coll.all_gather_s(gathered, link), coll.reduce_scatter_s(gathered, link)
    kv = setup.attention_kv_heads
    block = setup.act_bytes * setup.tokens * kv * (model.qk_head_dim + model.v_head_dim)
    overlap = setup.comm_overlap
    if setup.framework.cp_kv_exchange == "allgather":
        gather = coll.all_gather_s(block * plan.cp, link)
        first_fwd, first_bwd = core_fwd_s / plan.cp, core_bwd_s / plan.cp
        grad_pass = coll.p2p_s(4 / setup.act_bytes * block, link)
        bwd = (hidden_remainder(gather, first_bwd, overlap, SCALAR)
               + hidden_remainder((plan.cp - 1) * grad_pass, core_bwd_s - first_bwd, overlap, SCALAR) + grad_pass)
        return float(hidden_remainder(gather, first_fwd, overlap, SCALAR)), float(bwd)
    ring = (plan.cp - 1) * coll.p2p_s(block, link)
    return (float(hidden_remainder(ring, core_fwd_s, overlap, SCALAR)),
            float(hidden_remainder(2 * ring, core_bwd_s, overlap, SCALAR)))


def _rank_merge_bytes(c: int, full_steps: int, out: float, query: float, kv: float) -> tuple[float, float]:
    """Forward and backward bookkeeping bytes of the rank whose ``full_steps`` later steps use all its queries
    (the rest use their second half), per the op counts of :func:`cp_merge_bytes`."""
    half_steps = c - 1 - full_steps
    full_merge = (4 + 2) + 32  # cast the block output to fp32, three fp32 ops of the merge
    half_merge = full_merge / 2 + (4 + 4)  # the same on half the queries, then re-concatenate the whole output
    fwd = (6 + full_steps * full_merge + half_steps * half_merge + 6) * out + (c - 1) * (2 + 2) * kv
    full_add = 4 + 2 + 4  # fp32 sum += bf16 gradient
    half_add = full_add / 2 + (4 + 4)  # into one half, then re-concatenate
    bwd_query = (4 + full_add + full_steps * full_add + half_steps * half_add + 6) * query
    bwd_kv = (4 + full_add + full_steps * half_add + half_steps * full_add + (c - 1) * (2 + 2) + c * (4 + 4) + 6) * kv
    return fwd, bwd_query + bwd_kv


def cp_merge_bytes(setup: Setup) -> tuple[float, float]:
    """Forward and backward HBM bytes of one layer's context-parallel bookkeeping in PyTorch's
    ``context_parallel`` (``_templated_ring_attention`` and its backward, torch/distributed/tensor/experimental/
    _attention.py) for one micro-batch on the slowest rank (the next collective waits for it); 0 for other
    implementations or without CP.

    With ``O`` output and ``Q`` query elements and ``KV`` key plus value elements on a rank and ``c = cp`` steps,
    load-balanced round robin: rank ``r``'s later steps ``i <= r`` use its whole query (and, backward, the first
    half of the keys), steps ``i > r`` the second half of its query. Bytes per element (bf16 2, fp32 4):

    - forward: the first block output is cast to fp32 (2 + 4); each later step casts its block and merges it by
      ``out - sigmoid(lse_b - lse) * (out - out_b)`` (6 + 32), a half-query step on half the output and then
      re-concatenating all of it (19 + 8); the result is cast back (6); K and V are concatenated for sending
      before every step but the last (2 + 2 per ``KV``);
    - backward: fp32 zero buffers for the query, key and value gradients (4); the first step adds the kernel's
      bf16 gradients into them (4 + 2 + 4); each later step adds a gradient in full (10) or into one half followed
      by a re-concatenation (5 + 8), the query's in full and the keys' by half on steps ``i <= r`` and the other
      way round after; every step concatenates the fp32 K/V gradients for the next rank (4 + 4) and every step
      but the last concatenates K and V (2 + 2); the sums are cast back to bf16 (4 + 2).

    Counts are linear in ``r``, so the slowest rank is the first or the last.
    """
    plan, model = setup.plan, setup.model
    c = plan.cp
    if c == 1 or setup.framework.cp_kv_exchange != "allgather" or plan.cp_attention != "ring":
        return 0.0, 0.0
    heads, kv_heads = model.num_heads // plan.tp, setup.attention_kv_heads
    out = setup.tokens * heads * model.v_head_dim
    query = setup.tokens * heads * model.qk_head_dim
    kv = setup.tokens * kv_heads * (model.qk_head_dim + model.v_head_dim)
    first, last = _rank_merge_bytes(c, 0, out, query, kv), _rank_merge_bytes(c, c - 1, out, query, kv)
    return max(first[0], last[0]), max(first[1], last[1])


def lss_block_bytes(setup: Setup) -> float:
    """One rank's K and V as LSS sends them: the model's own K/V heads on a tp rank, one copy each, whether or not
    the engine copies them out to the query heads before attention (plait/run/lss.py)."""
    model = setup.model
    return float(setup.act_bytes * setup.tokens * setup.kv_heads_per_rank * (model.qk_head_dim + model.v_head_dim))


def lss_gathered_kv_bytes(setup: Setup) -> float:
    """Activation bytes LSS keeps beyond the ring per layer and micro-batch (0 for the other flavours): the
    attention kernel saves every rank's K/V, gathered in the forward (Wang et al. 2023, Fig. 1(v): each rank's
    partial self-attention reads the keys and values of every segment), instead of the rank's own K/V in the heads
    the kernel reads (:attr:`plait.cost.setup.Setup.attention_kv_heads`, counted in
    :func:`plait.cost.activations.attention_block_bytes`). With K/V copied out to many query heads and a small cp
    this is negative: LSS keeps one copy of each head."""
    plan, model = setup.plan, setup.model
    if plan.cp == 1 or plan.cp_attention != "lss":
        return 0.0
    local = setup.act_bytes * setup.tokens * setup.attention_kv_heads * (model.qk_head_dim + model.v_head_dim)
    return plan.cp * lss_block_bytes(setup) - local


def lss_mask_bytes(setup: Setup) -> float:
    """The attention mask LSS hands the kernel, per layer and micro-batch (0 for the other flavours): plait's LSS
    (:meth:`plait.run.lss.Lss.attention`) passes SDPA a boolean ``[S, T]`` visibility mask over its head-tail
    segments, which ATen turns into an additive bias in the query's dtype (``convert_boolean_attn_mask``,
    aten/src/ATen/native/transformers/attention.cpp) that the fused kernels keep for their backward
    (``_efficient_attention_forward`` and the CPU flash kernel take it as an input of the backward): ``S = T / cp``
    local queries by ``T`` keys, shared by the micro-batch's sequences and heads (broadcast)."""
    plan = setup.plan
    if plan.cp == 1 or plan.cp_attention != "lss":
        return 0.0
    return float(setup.act_bytes * (setup.seq_len // plan.cp) * setup.seq_len)
