"""The planner's verdict on chunked computation-collectives (``overlap_chunks``) for its best plan.

Chunking changes only the layer's exposed TP and EP collectives (:mod:`plait.cost.chunked`), never memory or the
layout, so the best chunk count of a plan is found by re-estimating it at each of :data:`CHUNKS` and keeping the
fastest: a search over one knob for the plan the layout search chose. It wins where a layer's collectives and the
GEMMs beside them take comparable time; where the collectives are small against the GEMMs there is little to
hide, and where they dwarf the GEMMs chunking hides only the GEMMs' time while each chunk pays the collective's
latency again. The verdict names the figures and, where the engine cannot run chunked collectives, its reason
(the plan is then kept unchunked; the engines' capability table says which can).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

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
        line = (f"overlap_chunks={self.chunks} would cut the step {100 * self.gain:.1f}% "
                f"({self.base_step_s:.4g} -> {self.step_s:.4g} s; {ratio})")
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
    steps = {c: estimate(model, cluster, replace(plan, overlap_chunks=c), engine=engine).step_time_s
             for c in (1, *CHUNKS)}  # closed forms (small pipelines simulated), all five alike
    chunks = min(steps, key=lambda c: (steps[c], c))
    refused = first_unsupported(replace(plan, overlap_chunks=max(chunks, 2)), model, engine)
    return ChunkVerdict(chunks, steps[chunks], steps[1], comm_s, gemm_s, refused)
