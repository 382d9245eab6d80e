"""The planner's verdict on chunked computation-collectives (``overlap_chunks``) for its best plan.

Chunking changes only the layer's exposed TP and EP collectives (:mod:`plait.cost.chunked`), never memory or the
layout, so the best chunk count of a plan is found by re-estimating it at each of :data:`CHUNKS` and keeping the
fastest: a search over one knob for the plan the layout search chose. It wins where a layer's collectives and the
GEMMs beside them take comparable time; where the collectives are small against the GEMMs there is little to
hide, and where they dwarf the GEMMs chunking hides only the GEMMs' time while each chunk pays the collective's
latency again. The verdict names the figures and, where the engine cannot run chunked collectives, its reason
(the plan is then kept unchunked; the engines' capability table says which can: plait's own runtime,
:mod:`plait.run.chunked_tp`). Where the engine can, the planner searches the knob: :func:`with_best_chunks` gives
each of the plans it shows its fastest chunk count before they are ranked again, since chunking changes only
exposed communication, and so cannot change which plans fit.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from plait.cost.chunked import ep_pass_s
from plait.cost.compute import gemms_fwd_bwd_s
from plait.cost.estimate import Estimate
from plait.cost.flops import mlp_block_gemms
from plait.cost.layer import attention_part
from plait.cost.setup import Setup
from plait.engine.capability import first_unsupported
from plait.engine.engine import Engine
from plait.hardware.cluster import Cluster
from plait.predict.estimate import estimate
from plait.workload.model import ModelSpec

CHUNKS = (2, 4, 8, 16)
"""Chunk counts tried (powers of two: the token counts of a micro-batch divide by them)."""


@dataclass(frozen=True)
class ChunkVerdict:
    """The best chunk count of one plan and why."""

    chunks: int
    """Fastest ``overlap_chunks`` (1: chunking does not pay)."""
    step_s: float
    """Predicted step at ``chunks``."""
    base_step_s: float
    """Predicted step unchunked."""
    comm_s: float
    """One layer's TP (or, for an MoE model without TP, EP) collectives of a forward pass, unchunked."""
    gemm_s: float
    """The forward GEMMs of one layer beside them."""
    refused: str | None
    """Why the engine cannot run chunked collectives (``None``: it can)."""
    applied: bool = False
    """Whether the plan already has :attr:`chunks` (the planner searched it for an engine that runs it)."""

    @property
    def gain(self) -> float:
        """Relative step-time saving at :attr:`chunks`."""
        return 1.0 - self.step_s / self.base_step_s

    def text(self) -> str:
        """One line for ``plait plan``."""
        ratio = f"a layer's collectives {1e3 * self.comm_s:.3g} ms beside {1e3 * self.gemm_s:.3g} ms of GEMMs"
        if self.chunks == 1:
            why = ("too little to hide" if self.comm_s < 0.1 * self.gemm_s
                   else "each chunk pays the collective's latency and a smaller GEMM's efficiency for more than it hides")
            return f"overlap_chunks does not pay for this plan ({ratio}: {why})"
        verb = "cuts" if self.applied else "would cut"
        line = (f"overlap_chunks={self.chunks} {verb} the step {100 * self.gain:.1f}% "
                f"({self.base_step_s:.4g} -> {self.step_s:.4g} s; {ratio})")
        if self.applied:
            return line + "; applied (the planner searched it)"
        return line + (f"; not applied: {self.refused}" if self.refused else "; set overlap_chunks in the plan file")


def chunk_verdict(model: ModelSpec, cluster: Cluster, engine: Engine, best: Estimate) -> ChunkVerdict | None:
    """The verdict for ``best`` (``None`` where no layer has a TP or EP collective to chunk)."""
    plan = best.plan
    moe_ep = model.moe is not None and plan.ep > 1
    if plan.tp == 1 and not moe_ep or plan.tp_comm_overlap or plan.tp_mode != "1d":  # a grid is not chunked
        return None
    setup = Setup(model=model, cluster=cluster, plan=plan, framework=engine.framework)
    if plan.tp > 1:  # both blocks' collectives of one pass beside the layer's forward GEMMs
        attention = attention_part(setup)
        comm_s = attention.tp_comm_s
        gemm_s = gemms_fwd_bwd_s(mlp_block_gemms(setup, model.moe is not None), setup,
                                 start=(attention.gemm_fwd_s, 0.0))[0]
    else:  # dispatch and combine beside the routed experts' GEMMs (moe_gemms: router first)
        comm_s = ep_pass_s(setup)
        gemm_s = gemms_fwd_bwd_s(mlp_block_gemms(setup, True)[1:3], setup)[0]
    steps = {c: estimate(model, cluster, replace(plan, overlap_chunks=c), engine=engine, simulate=True).step_time_s
             for c in (1, *CHUNKS)}  # as the planner's top plans are timed (pipelines simulated), all five alike
    chunks = min(steps, key=lambda c: (steps[c], c))
    refused = first_unsupported(replace(plan, overlap_chunks=max(chunks, 2)), model, engine)
    return ChunkVerdict(chunks, steps[chunks], steps[1], comm_s, gemm_s, refused, chunks > 1 and plan.overlap_chunks == chunks)


def runs_chunks(engine: Engine) -> bool:
    """Whether ``engine`` runs ``overlap_chunks`` at all (plait's runtime refuses only some combinations)."""
    return "overlap_chunks" not in engine.unsupported


def hidden_at_most(comm_s: Any, comm_overlap: float) -> Any:
    """Seconds chunking can hide of a plan's TP and EP collectives ``comm_s`` (per row of an array too): :func:`plait.cost.chunked.pipelined_s` of ``c`` chunks of a
    collective ``C`` and its GEMMs ``G`` is ``(C + G) / c + (c - 1) / c (max + (1 - o) min)`` even without the
    chunks' latencies and smaller GEMMs, more than ``max + (1 - o) min``, so it saves less than
    ``o min(C, G) <= o C`` against ``C + G`` (``o``: the accelerator's ``comm_overlap``)."""
    return comm_overlap * comm_s


def chunk_bound_tokens_per_s(est: Estimate, comm_overlap: float) -> float:
    """The most tokens per second ``est``'s plan can reach at any chunk count (:func:`hidden_at_most`)."""
    return est.target_tokens_per_s * est.step_time_s / max(
        est.step_time_s - hidden_at_most(est.time.tp_comm_s + est.time.ep_comm_s, comm_overlap), 1e-12)


def search_chunks(pool: list[Estimate], k: int, model: ModelSpec, cluster: Cluster, engine: Engine,
                  beyond: Callable[[float], list[tuple[float, Callable[[], Estimate]]]]) -> list[Estimate]:
    """``pool`` (best first) with each plan that could still be among the ``k`` fastest at its fastest chunk count
    (:func:`with_best_chunks`), then the plans ``beyond`` the pool whose bound on the closed forms (their tokens
    per second with every TP collective hidden, highest first, each with a function assembling its estimate)
    passes the ``k``-th best so far: the same ``k`` plans as chunking every feasible plan, with only those that
    can matter estimated again."""
    done: list[Estimate] = []
    fastest = _KFastest(k)
    overlap = cluster.accelerator.efficiency.comm_overlap.value

    def keep(ests: list[Estimate]) -> None:
        done.extend(ests)
        for e in ests:
            fastest.add(e.target_tokens_per_s)

    for est in pool:
        keep(with_best_chunks([est], model, cluster, engine) if chunk_bound_tokens_per_s(est, overlap) > fastest.kth
             else [est])
    for bound, assemble in beyond(fastest.kth):
        if bound <= fastest.kth:
            break
        est = assemble()
        if chunk_bound_tokens_per_s(est, overlap) > fastest.kth:
            keep(with_best_chunks([est], model, cluster, engine))
    return done


class _KFastest:
    """The ``k`` highest tokens per second seen so far, in a min-heap: :attr:`kth` is the ``k``-th best (0 while
    fewer than ``k`` were seen), kept in O(log k) a plan instead of sorting every plan seen at each one."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.heap: list[float] = []

    def add(self, speed: float) -> None:
        if len(self.heap) < self.k:
            heapq.heappush(self.heap, speed)
        elif speed > self.heap[0]:
            heapq.heapreplace(self.heap, speed)

    @property
    def kth(self) -> float:
        return self.heap[0] if len(self.heap) >= self.k else 0.0


def with_best_chunks(estimates: list[Estimate], model: ModelSpec, cluster: Cluster, engine: Engine) -> list[Estimate]:
    """Each of ``estimates`` at its fastest ``overlap_chunks`` of 1 and :data:`CHUNKS` where ``engine`` runs chunked
    collectives for its plan (tensor or expert parallelism, no async TP; the capability table); the others as
    they are.
    The chunk counts are compared by the closed forms (chunking changes each layer's time alike in every pipeline
    stage); the fastest is then estimated as the planner's top plans are (pipelines re-timed by the simulation)."""
    out = []
    for est in estimates:
        plan = est.plan
        runs = ((plan.tp > 1 or model.moe is not None and plan.ep > 1) and plan.overlap_chunks == 1
                and not plan.tp_comm_overlap
                and first_unsupported(replace(plan, overlap_chunks=2), model, engine) is None)
        if not runs:
            out.append(est)
            continue
        closed = {c: estimate(model, cluster, replace(plan, overlap_chunks=c), engine=engine, simulate=False)
                  for c in CHUNKS}
        best = min(closed, key=lambda c: (closed[c].step_time_s, c))
        chunked = closed[best] if plan.pp == 1 else estimate(model, cluster, replace(plan, overlap_chunks=best),
                                                             engine=engine, simulate=True)
        out.append(chunked if chunked.step_time_s < est.step_time_s else est)
    return out
