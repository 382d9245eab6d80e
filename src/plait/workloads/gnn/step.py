"""One rank's GNN step, its parts in seconds, and the epoch (:func:`plait.workloads.gnn.cost.estimate_gnn`): the
device's work and what of the host's dispatch it does not hide, or, with DGL's synchronizing GPU sampler, the phases
one after another, or a host loader's own step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from plait.cost.host import exposed_host_s
from plait.workloads.gnn.sampling import SampledBatch


class Feed(Protocol):
    """A host loader's step beside its trainer (:class:`plait.workloads.gnn.host.HostStep`): its own step and epoch."""

    @property
    def step_s(self) -> float: ...

    def epoch_s(self, steps: int) -> float: ...


@dataclass(frozen=True, kw_only=True)
class GnnEstimate:
    """One step of one rank, its parts in seconds, and the epoch."""

    strategy: str
    batch: SampledBatch | None
    """The expected sampled batch (``None`` for full-graph training)."""
    sampling_s: float
    fetch_s: float
    compute_s: float
    all_reduce_s: float
    optimizer_s: float
    fetch_bytes: float
    """What each rank sends its peers for features (all-to-all), or reads over PCIe (host features)."""
    memory_bytes: float
    steps_per_epoch: int
    correction_s: float = 0.0
    """LLCG: the server's correction steps, per local step."""
    host_s: float = 0.0
    """The host's dispatch of the step's layers, loss and optimizer (:mod:`plait.workloads.gnn.dispatch`)."""
    asynchronous_launch: bool = True
    """Whether the device queues the host's launches (the accelerator's
    :attr:`plait.hardware.accelerator.Accelerator.asynchronous_launch`)."""
    feed: Feed | None = None
    """A host loader feeding the trainer (:mod:`plait.workloads.gnn.feed`): the step and epoch are then its own."""
    synchronized_sampling: bool = False
    """Whether the sampler waits on the device at every hop and the loop reads back before the next batch (DGL's GPU
    sampler in its training loop, :mod:`plait.workloads.gnn.dgl_gpu_sampler`): the step is then its phases one after
    another, :attr:`sampling_s` holding the sampler's host time, and only the training's device work hides the
    host's dispatch."""
    loop_sync_s: float = 0.0
    """The training loop's own round trips to the device per step, outside the sampler."""

    @property
    def device_s(self) -> float:
        return (self.sampling_s + self.fetch_s + self.compute_s + self.all_reduce_s + self.optimizer_s
                + self.correction_s)

    @property
    def step_s(self) -> float:
        """The device's work and whatever of the host's dispatch it does not hide (the queue rule of
        :mod:`plait.cost.host`: the longer of the two behind a launch queue, their sum without one); with
        :attr:`synchronized_sampling` the phases one after another, the training's device work alone hiding the
        dispatch; or the host loader's step (:attr:`feed`)."""
        if self.feed is not None:
            return self.feed.step_s
        if self.synchronized_sampling:
            train_s = self.compute_s + self.all_reduce_s + self.optimizer_s + self.correction_s
            exposed = float(exposed_host_s(train_s, self.host_s, np, self.asynchronous_launch))
            return self.sampling_s + self.fetch_s + train_s + exposed + self.loop_sync_s
        return self.device_s + float(exposed_host_s(self.device_s, self.host_s, np, self.asynchronous_launch))

    @property
    def epoch_s(self) -> float:
        if self.feed is not None:
            return self.feed.epoch_s(self.steps_per_epoch)
        return self.step_s * self.steps_per_epoch
