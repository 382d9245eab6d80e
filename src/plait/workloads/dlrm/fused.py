"""A DLRM's embedding lookups fused with their all-to-alls, chunked (Punniyamurthy et al., SC 2024, arXiv
2305.06942: embedding+All-to-All, whose pooled outputs leave as soon as their workgroups finish).

:func:`plait.workloads.dlrm.cost.estimate_dlrm` charges each rank its lookups, then its all-to-alls, in sequence.
Split the samples of a step into ``c`` equal slices and each slice's pooled outputs can be sent while the next
slice is looked up; in the backward, each slice's gradients arrive while the previous slice's rows are updated. Per
rank and pass this is the two-stage pipeline of :func:`plait.cost.chunked.pipelined_s` (lookup slice, then its
all-to-all of ``1 / c`` of the pooled bytes, each with the collective's full latency). The input all-to-all of ids
and lengths and the all-reduces stay whole and in sequence, as in the unchunked model; the bytes do not change.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from plait.cost.chunked import pipelined_s
from plait.cost.compute import memory_bytes_per_s
from plait.cost.links import collective_s
from plait.hardware.cluster import Cluster
from plait.workloads.dlrm.cost import DlrmEstimate, RankLoad
from plait.workloads.dlrm.predict import DlrmPrediction

CHUNKS = (2, 4, 8, 16)
"""Sample slices tried by :func:`best_chunks`."""


def fused_rank_s(load: RankLoad, cluster: Cluster, group: int, world: int, chunks: int) -> tuple[float, float]:
    """One rank's lookups and all-to-alls with ``chunks`` sample slices: (lookup + all-to-all seconds as pipelined,
    the same unchunked as :func:`~plait.workloads.dlrm.cost.estimate_dlrm` splits them)."""
    hbm = memory_bytes_per_s(cluster.accelerator)
    spread = group / (group - 1) if group > 1 else 1.0  # as estimate_dlrm: bytes spread over all g ranks

    def a2a(num_bytes: float) -> float:
        return float(collective_s(cluster, "all_to_all", group, world // group, num_bytes * spread))

    fwd_s, bwd_s = load.lookup_fwd_bytes / hbm, (load.lookup_bytes - load.lookup_fwd_bytes) / hbm
    pooled = max(load.pooled_out, load.pooled_in)
    overlap = cluster.accelerator.efficiency.comm_overlap.value
    piece = a2a(pooled / chunks)
    inputs = a2a(max(load.index_out, load.index_in) + load.header_bytes)
    fwd, bwd = fwd_s / chunks, bwd_s / chunks  # one slice's lookups (HBM-bound: proportional to its ids)
    return (pipelined_s([fwd, piece], chunks, overlap) + pipelined_s([piece, bwd], chunks, overlap) + inputs,
            fwd_s + bwd_s + a2a(load.a2a_bytes))


def fused_estimate(pred: DlrmPrediction, chunks: int) -> DlrmEstimate:
    """``pred``'s estimate with every rank's lookups and pooled all-to-alls chunked into ``chunks`` slices."""
    est = pred.estimate
    times = []
    for r, load in enumerate(pred.loads):
        fused, whole = fused_rank_s(load, pred.cluster, pred.group, pred.world, chunks)
        times.append(est.rank_time_s[r] - whole + fused)
    return replace(est, rank_time_s=tuple(times), step_s=max(times) + est.dense_s)


@dataclass(frozen=True)
class FusedVerdict:
    """The fastest slice count for one placement."""

    chunks: int
    step_s: float
    base_step_s: float
    lookup_s: float
    """The busiest rank's lookups (forward and backward)."""
    all_to_all_s: float
    """Its all-to-alls, unchunked."""

    def text(self) -> str:
        ratio = f"busiest rank: lookups {1e3 * self.lookup_s:.3g} ms, all-to-alls {1e3 * self.all_to_all_s:.3g} ms"
        if self.chunks == 1:
            return f"fusing the lookups with their all-to-alls does not pay here ({ratio})"
        gain = 100 * (1 - self.step_s / self.base_step_s)
        return (f"lookups fused with their all-to-alls in {self.chunks} slices would cut the step {gain:.1f}% "
                f"({1e3 * self.base_step_s:.4g} -> {1e3 * self.step_s:.4g} ms; {ratio}); not applied: TorchRec's "
                "train pipeline runs each lookup and its all-to-all whole (plait.run.chunked runs the fused form on "
                "plain torch)")


def best_chunks(pred: DlrmPrediction) -> FusedVerdict:
    """The slice count of :data:`CHUNKS` (or 1) with the shortest step for ``pred``'s placement."""
    est = pred.estimate
    steps = {1: est.step_s, **{c: fused_estimate(pred, c).step_s for c in CHUNKS}}
    chunks = min(steps, key=lambda c: (steps[c], c))
    busiest = max(range(len(est.rank_time_s)), key=lambda r: est.rank_time_s[r])
    return FusedVerdict(chunks, steps[chunks], steps[1], est.rank_lookup_s[busiest], est.rank_all_to_all_s[busiest])
