"""Horovod's Tensor Fusion: gradients all-reduced in fused batches, once per background cycle.

How Horovod reduces (horovod/horovod docs/tensor-fusion.rst; ``RunLoopOnce`` in horovod/common/operations.cc):
a background thread wakes once every ``cycle time`` (it sleeps until the last cycle's start plus the cycle time),
takes the gradients that every rank has ready by then, copies them into a fusion buffer of at most
``HOROVOD_FUSION_THRESHOLD`` bytes, all-reduces the buffer and copies the result back out, buffer after buffer, until
nothing ready is left. A gradient ready between two cycles waits for the next one: ``horovodrun --help``, 'The larger
the cycle time, the more batching, but the greater latency between each allreduce'. So the last gradients of the
backward wait up to one cycle before their all-reduce starts, and that wait is exposed.

The cycle's phase against the backward is not fixed from step to step, so the exposed seconds are averaged over
:data:`PHASES` evenly spaced phases. All-reduces run one after another on one stream, as
:func:`plait.workloads.traced.dataparallel.ddp_buckets_s` runs DDP's buckets; a batch of more than one gradient is
copied into the buffer and back out (a read and a write of its bytes each way, at the sustained memory bandwidth).
"""

from __future__ import annotations

from dataclasses import dataclass

from plait.cost.compute import memory_bytes_per_s
from plait.cost.links import collective_s
from plait.hardware.cluster import Cluster
from plait.plan.plan import Plan

PHASES = 16
"""Evenly spaced phases of the fusion cycle against the backward's start that the exposed time is averaged over."""


@dataclass(frozen=True, kw_only=True)
class TensorFusion:
    """Horovod's fusion settings of a run (module docstring)."""

    cycle_s: float
    """Seconds between two fusion cycles (``HOROVOD_CYCLE_TIME``)."""
    threshold_bytes: float
    """Largest fused all-reduce in bytes (``HOROVOD_FUSION_THRESHOLD``)."""
    source: str
    """Which Horovod ran and where its defaults are written."""

    def __post_init__(self) -> None:
        assert self.cycle_s > 0 and self.threshold_bytes > 0, self

    def exposed_s(self, cluster: Cluster, plan: Plan, ready: list[tuple[float, float]], backward_s: float) -> float:
        """Mean seconds the fused all-reduces run past the backward's end ``backward_s``, over :data:`PHASES`
        phases of the cycle; ``ready``: each gradient's (ready seconds, bytes) in the order they complete."""
        if plan.dp <= 1 or not ready:
            return 0.0
        phases = [(k + 0.5) / PHASES * self.cycle_s for k in range(PHASES)]
        return sum(max(0.0, self._end_s(cluster, plan, ready, p) - backward_s) for p in phases) / PHASES

    def _end_s(self, cluster: Cluster, plan: Plan, ready: list[tuple[float, float]], phase_s: float) -> float:
        """When the last fused all-reduce ends with cycles at ``phase_s + k * cycle_s``; ``ready`` times rise along
        the completion order, so each cycle takes a prefix of what is left."""
        end, first = 0.0, 0
        while first < len(ready):
            cycles = max(0.0, -((phase_s - ready[first][0]) // self.cycle_s))  # the first cycle it is ready for
            tick = phase_s + cycles * self.cycle_s
            last = first
            while last < len(ready) and ready[last][0] <= tick:
                last += 1
            for batch in _batches([size for _, size in ready[first:last]], self.threshold_bytes):
                end = max(end, tick) + self._reduce_s(cluster, plan, batch)
            first = last
        return end

    def _reduce_s(self, cluster: Cluster, plan: Plan, batch: list[float]) -> float:
        """One fused all-reduce: the copies into and out of the buffer (more than one gradient), then the
        all-reduce over the ``dp`` replicas."""
        size = sum(batch)
        copies = 4.0 * size / memory_bytes_per_s(cluster.accelerator) if len(batch) > 1 else 0.0
        return copies + float(collective_s(cluster, "all_reduce", plan.dp, plan.tp, size))


def _batches(sizes: list[float], threshold: float) -> list[list[float]]:
    """``sizes`` in order, cut into consecutive batches of at most ``threshold`` bytes (a larger one alone)."""
    batches: list[list[float]] = []
    for size in sizes:
        if batches and sum(batches[-1]) + size <= threshold:
            batches[-1].append(size)
        else:
            batches.append([size])
    return batches


HOROVOD_0_20 = TensorFusion(
    cycle_s=5e-3,
    threshold_bytes=64 * 2**20,
    source="Horovod before 0.21.0 (horovod/common/operations.cc at v0.19.0 and v0.20.0: SetCycleTimeMs(5), "
    "SetTensorFusionThresholdBytes(64 * 1024 * 1024)); NGC's TensorFlow 20.10 container ships Horovod 0.20.0 "
    "(its release notes), so 20.06 ran 0.20 or earlier",
)
"""Horovod's defaults up to 0.20.x."""
HOROVOD_0_21 = TensorFusion(
    cycle_s=1e-3,
    threshold_bytes=128 * 2**20,
    source="Horovod 0.21.0 and later (horovod/horovod#2468, 2020-11-19: 'Changed default cycle time from 5ms to 1ms "
    "and fusion threshold from 64MB to 128MB'; operations.cc at v0.21.0); NGC's MXNet 21.03 container ships "
    "Horovod 0.21.2 (its release notes), later containers newer",
)
"""Horovod's defaults from 0.21.0."""
