"""Chunked overlap of a GEMM (or an embedding lookup) with the collective that feeds or follows it.

Fused computation-collectives (Punniyamurthy, Hamidouche and Beckmann, "Optimizing Distributed ML Communication
with Fused Computation-Collective Operations", SC 2024, arXiv 2305.06942) send each part of a result as soon as
the workgroups that produce it finish, so the collective of one part runs while the next part computes; the paper
fuses embedding+All-to-All (DLRM), GEMV+AllReduce (Transformer TP) and GEMM+All-to-All (MoE) and reports about
20%, 13% and 12% lower combined time. plait costs the same idea at a granularity it can run with
``torch.distributed``: the operation split into ``c`` equal chunks along its rows (tokens or samples), each chunk's
collective issued asynchronously as soon as it is computed (:mod:`plait.run.chunked`).

The time of ``c`` equal chunks through ``k`` stages (compute, then communicate; or gather, then compute; or
dispatch, compute, combine) is the pipeline's fill and drain plus ``c - 1`` beats of its slowest stage,
``sum_i s_i + (c - 1) max_i s_i`` for per-chunk stage times ``s_i`` (the standard form of a pipeline of identical
items, as GPipe's bubble, Huang et al. 2019, Sec. 2.3; with two stages it is "first chunk's compute + (c - 1)
max(compute, comm) + last chunk's comm", the decomposition of Wang et al., ASPLOS 2023, "Overlap Communication
with Dependent Computation via Decomposition in Large Deep Learning Models", Sec. 3). The paper's own analytical
model was not read here. Each chunk's stage times come from plait's existing curves: the GEMM of ``m / c`` rows at
its (lower) small-shape efficiency, the collective of ``1 / c`` of the bytes with its full per-collective latency,
so chunking trades overlap against per-chunk latency and smaller GEMMs, and a larger ``c`` stops paying. While two
stages overlap they contend (:mod:`plait.cost.overlap`): the accelerator's ``comm_overlap`` share of the
overlapped beats stays hidden, the rest is charged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from plait.cost import collectives as coll
from plait.cost.compute import gemms_fwd_bwd_s
from plait.cost.flops import Gemm
from plait.cost.setup import Setup


def pipelined_s(stage_chunk_s: Sequence[float], chunks: int, overlap: float = 1.0, beat_s: float | None = None) -> float:
    """Seconds for ``chunks`` equal chunks through stages taking ``stage_chunk_s`` each per chunk (module
    docstring): ``sum + (chunks - 1) * beat``, the beat being the slowest stage (``beat_s`` where stages share a
    resource, as a dispatch and a combine share the link), plus ``1 - overlap`` of what runs beside the beat's
    stage in the ``chunks - 1`` steady beats (contention). One chunk is the stages in sequence."""
    if chunks < 1:
        raise ValueError(f"chunks={chunks} must be >= 1")
    total = sum(stage_chunk_s)
    beat = max(stage_chunk_s) if beat_s is None else beat_s
    beside = min(beat, total - beat)  # per beat, what the other resource does beside the busiest one
    return total + (chunks - 1) * (beat + (1.0 - overlap) * beside)


def chunked_gemms(gemms: Sequence[Gemm], chunks: int) -> list[Gemm]:
    """One chunk of ``gemms``: ``1 / chunks`` of their rows (at least one row each)."""
    return [Gemm(max(g.m // chunks, 1), g.n, g.k, g.count) for g in gemms]


def exposed_s(comm_s: Callable[[float], float], comm_bytes: float, gemms: Sequence[Gemm], setup: Setup, chunks: int,
              stages: int = 2) -> tuple[float, float]:
    """Forward and backward seconds a chunked GEMM group adds beyond its unchunked compute: the pipeline of
    ``chunks`` chunks (``stages`` = 2: one collective and the GEMMs; 3: a collective on each side, as an MoE's
    dispatch and combine) minus the unchunked GEMM time the layer already counts. ``comm_s`` costs one
    collective of the given bytes; ``comm_bytes`` is one collective's whole size. With ``chunks`` = 1 this is the
    collectives alone, as without overlap."""
    whole_fwd, whole_bwd = gemms_fwd_bwd_s(list(gemms), setup)
    part_fwd, part_bwd = gemms_fwd_bwd_s(chunked_gemms(gemms, chunks), setup)
    comm = comm_s(comm_bytes / chunks)
    out = []
    for part, whole in ((part_fwd, whole_fwd), (part_bwd, whole_bwd)):
        links = (stages - 1) * comm  # the collectives of one chunk share the group's links
        out.append(pipelined_s([links, part], chunks, setup.comm_overlap, max(links, part)) - whole)
    return out[0], out[1]


def tp_chunked_s(setup: Setup, attention_gemms: Sequence[Gemm], mlp_gemms: Sequence[Gemm] | None) -> tuple[float, float]:
    """Exposed TP/SP communication of one layer's forward and backward with ``overlap_chunks`` = ``c``.

    With sequence parallelism each block gathers its input before its first GEMMs and reduce-scatters the output
    of its last (Korthikanti et al. 2022, Sec. 4.2.2): all-gather -> QKV, proj -> reduce-scatter,
    all-gather -> up, down -> reduce-scatter; without it the last GEMM of each block is followed by an all-reduce
    (the paper's GEMV+AllReduce). The backward pass runs the same collectives mirrored beside its input- and
    weight-gradient GEMMs (as :func:`plait.cost.tp_comm.tp_comm_s` charges them both ways). ``mlp_gemms`` None:
    an MoE block, whose TP collectives stay whole (its experts chunk with their all-to-alls instead)."""
    plan = setup.plan
    link = coll.group_link(setup.cluster, plan.tp, 1)
    gathered, reduced = tp_block_bytes(setup)
    c = plan.overlap_chunks
    fwd = bwd = 0.0
    if mlp_gemms is None:  # the MoE block's collectives, unchunked
        whole = (coll.all_gather_s(gathered, link) + coll.reduce_scatter_s(reduced, link) if plan.sp
                 else coll.all_reduce_s(reduced, link))
        fwd = bwd = whole
    for block in [b for b in (attention_gemms, mlp_gemms) if b]:
        first, last = list(block[:-1]), [block[-1]]
        if plan.sp:
            pairs = [(lambda b: coll.all_gather_s(b, link), gathered, first),
                     (lambda b: coll.reduce_scatter_s(b, link), reduced, last)]
        else:
            pairs = [(lambda b: coll.all_reduce_s(b, link), reduced, last)]
        for comm, size, gemms in pairs:
            f, b = exposed_s(comm, size, gemms, setup, c)
            fwd, bwd = fwd + f, bwd + b
    return fwd, bwd


def tp_block_bytes(setup: Setup) -> tuple[float, float]:
    """Bytes of one block's TP collectives: the gathered norm output and the reduced GEMM partial sums (as
    :func:`plait.cost.tp_comm.tp_comm_s` sizes them; chunking splits them into ``c`` messages, the same bytes)."""
    hidden = setup.tokens * setup.model.hidden_size
    return setup.residual_bytes * hidden, setup.act_bytes * hidden


def chunked_step_bytes(setup: Setup, layers: Sequence[tuple[bool, bool]]) -> float:
    """Buffer bytes of one rank's chunked collectives in a step through ``layers``, each ``(moe, recomputed)``:
    per layer, micro-batch and pass (forward, then backward mirrored), a dense layer's two blocks' TP all-gather
    and reduce-scatter with sequence parallelism, or one all-reduce each without (Korthikanti et al. 2022,
    Sec. 4.2.2; sized by :func:`tp_block_bytes`), where tp > 1; an MoE layer's dispatch and combine all-to-alls
    (:func:`ep_send_bytes` each: routing balanced over the EP ranks), where ep > 1. A recomputed layer (full
    recomputation) runs its forward twice. Chunking splits each collective into ``c`` messages, the same bytes."""
    plan = setup.plan
    gathered, reduced = tp_block_bytes(setup)
    dense = 2 * (gathered + reduced if plan.sp else reduced) if plan.tp > 1 else 0.0
    moe = 2 * ep_send_bytes(setup) if setup.model.moe is not None and plan.ep > 1 else 0.0
    return plan.num_micro_batches * sum((moe if is_moe else dense) * (3 if again else 2) for is_moe, again in layers)


def ep_send_bytes(setup: Setup) -> float:
    """Bytes one rank sends in one dispatch (or combine) all-to-all of an MoE layer (as
    :func:`plait.cost.layer._ep_pass_s` sizes it)."""
    return _ep_link_bytes(setup)[1]


def ep_chunked_s(setup: Setup, expert_gemms: Sequence[Gemm]) -> tuple[float, float]:
    """Exposed dispatch and combine all-to-all of one MoE pass with ``overlap_chunks`` = ``c``: dispatch ->
    expert GEMMs -> combine as a three-stage pipeline of ``c`` token chunks (the paper's GEMM+All-to-All, with the
    dispatch chunked too); the backward mirrors it (combine gradients -> expert backward GEMMs -> dispatch
    gradients)."""
    link, send = _ep_link_bytes(setup)
    return exposed_s(lambda b: coll.all_to_all_s(b, link), send, expert_gemms, setup, setup.plan.overlap_chunks,
                     stages=3)


def ep_pass_s(setup: Setup) -> float:
    """Dispatch plus combine all-to-all of one MoE pass, unchunked (as :func:`plait.cost.layer._ep_pass_s`)."""
    link, send = _ep_link_bytes(setup)
    return 2 * coll.all_to_all_s(send, link)


def _ep_link_bytes(setup: Setup) -> tuple[coll.GroupLink, float]:
    """The expert-parallel group's link and the bytes each rank sends in one all-to-all."""
    plan, model = setup.plan, setup.model
    assert model.moe is not None
    link = coll.group_link(setup.cluster, plan.ep, plan.tp)
    return link, setup.act_bytes * setup.tokens * model.moe.top_k * model.hidden_size
