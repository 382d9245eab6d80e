"""The timeline of a GNN training step: one step of every rank, its phases in sequence (sampling,
feature fetch, compute, gradient all-reduce, optimizer: :mod:`plait.workloads.gnn.cost`)."""

from __future__ import annotations

from plait.simulate.pipeline import Timeline
from plait.workloads.gnn.cost import GnnEstimate


def gnn_timeline(est: GnnEstimate, ranks: int) -> Timeline:
    """One step of every rank: its phases in sequence."""
    timeline = Timeline()
    phases = (("sampling", est.sampling_s, "compute"), ("feature fetch", est.fetch_s, "comm"),
              ("forward+backward", est.compute_s, "compute"), ("gradient all-reduce", est.all_reduce_s, "comm"),
              ("optimizer", est.optimizer_s, "compute"))
    for rank in range(ranks):
        now = 0.0
        for name, seconds, stream in phases:
            if seconds > 0:
                timeline.add(rank, stream, name, now, now + seconds)
                now += seconds
    timeline.step_time_s = est.step_s
    return timeline
