"""The timeline of a GNN training step: one step of every rank, its phases in sequence (sampling,
feature fetch, compute, gradient all-reduce, optimizer: :mod:`plait.workloads.gnn.cost`); with a host loader
(:mod:`plait.workloads.gnn.feed`), the loader's workers on the host beside the training loop, in steady state
(:class:`plait.workloads.gnn.host.HostStep`: the step is the slower of the two)."""

from __future__ import annotations

from plait.simulate.pipeline import Timeline
from plait.workloads.gnn.host import HostStep
from plait.workloads.gnn.step import GnnEstimate


def gnn_timeline(est: GnnEstimate, ranks: int) -> Timeline:
    """One step of every rank: its phases in sequence, or a host loader's beside its loop."""
    timeline = Timeline()
    for rank in range(ranks):
        if isinstance(est.feed, HostStep):
            _fed_step(timeline, rank, est, est.feed)
            continue
        phases = (
            ("sampling", est.sampling_s, "compute"),
            ("feature fetch", est.fetch_s, "comm"),
            ("forward+backward", est.compute_s, "compute"),
            ("gradient all-reduce", est.all_reduce_s, "comm"),
            ("optimizer", est.optimizer_s, "compute"),
            ("server correction", est.correction_s, "compute"),  # LLCG's, per local step
            ("loop read-backs", est.loop_sync_s, "host"),  # DGL's GPU-sampled loops (gnn/dgl_gpu_sampler.py)
        )
        _in_sequence(timeline, rank, 0.0, phases)
    timeline.step_time_s = est.step_s
    return timeline


def _in_sequence(timeline: Timeline, rank: int, now: float, phases: tuple[tuple[str, float, str], ...]) -> float:
    for name, seconds, stream in phases:
        if seconds > 0:
            timeline.add(rank, stream, name, now, now + seconds)
            now += seconds
    return now


def _fed_step(timeline: Timeline, rank: int, est: GnnEstimate, feed: HostStep) -> None:
    """A loader's steady step (:attr:`HostStep.step_s`): its workers' share of a batch on the host; the loop's
    trainer (rows on the GPU, compute, all-reduce, optimizer: :attr:`HostStep.trainer_s` unless the host's dispatch
    is longer), with the slicing where the loop slices and the copy after it, or beside it where it is pipelined."""
    workers_s = feed.pool_s
    _in_sequence(timeline, rank, 0.0, (("loader sampling", workers_s, "host"),))
    rows_s = est.fetch_s - feed.slicing_s - feed.transfer_s
    slicing = feed.slicing_s if feed.loader.slicing == "trainer" else 0.0
    now = _in_sequence(
        timeline,
        rank,
        0.0,
        (
            ("batch slicing", slicing, "compute"),
            ("input rows", rows_s, "compute"),
            ("forward+backward", est.compute_s, "compute"),
            ("gradient all-reduce", est.all_reduce_s, "comm"),
            ("optimizer", est.optimizer_s, "compute"),
        ),
    )
    start = now if feed.loader.transfer == "serial" else 0.0
    _in_sequence(timeline, rank, start, (("batch copy", feed.transfer_s, "comm"),))
