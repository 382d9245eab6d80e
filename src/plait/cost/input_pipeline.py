"""The input pipeline: host cores decode and augment samples while the device trains on earlier ones.

A training loop with a prefetching loader (PyTorch ``DataLoader`` workers, ``tf.data``, NVIDIA DALI) runs two
streams that meet once per micro-batch: the loader prepares batch ``i + 1`` while the device computes batch ``i``,
so a step lasts as long as the slower of the two (the producer-consumer bound of a pipelined loop; Mohan et al.,
"Analyzing and Mitigating Data Stalls in DNN Training", VLDB 2021, Sec. 2: a "prep stall" is the device time spent
waiting for pre-processed data). The device's step here already holds the kernel-issuing host thread's waits
(:mod:`plait.cost.host`); the loader runs on other cores. The loader's time per step is

    samples per GPU x host seconds per sample / (parallel host workers x core speed),

where the workers are the host cores a GPU's share of its node gives it, at most the loader processes the job
starts (a GPU alone on an 8-GPU node has the whole node's cores). Per-sample host costs, by loader kind, are the
figures of ``plait/hardware/data/loaders.toml``, each with its source; the host cores per GPU are the cluster
description's (:attr:`plait.hardware.cluster.Cluster.host_cores_per_node`). A figure measured on one CPU runs on the
cluster's host CPU at their per-core speed ratio in one public benchmark (:func:`plait.hardware.host_cpu.core_speed`;
1.0, assumed, where no score is known).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from plait.errors import ConfigError
from plait.hardware.catalog import loader_table
from plait.hardware.cluster import Cluster
from plait.hardware.figure import Figure
from plait.hardware.host_cpu import core_speed, get_host_cpu

LoaderKind = Literal["framework_jpeg", "dali_cpu", "dali_gpu", "pretokenized", "synthetic"]
"""How samples reach the device: JPEGs decoded on host cores by the framework's loader or by DALI's CPU backend,
JPEGs decoded on the GPU by DALI's mixed decoder, pre-tokenized text, or synthetic tensors made on the device."""


@dataclass(frozen=True, kw_only=True)
class Loader:
    """One input pipeline of a run."""

    kind: LoaderKind
    """The loader (:data:`LoaderKind`)."""
    host_s_per_sample: Figure
    """Seconds one host core spends preparing one sample, with its source."""
    workers_per_gpu: int | None = None
    """Loader processes or threads the run starts per GPU (``None``: as many as its cores)."""
    measured_on: str = ""
    """The CPU ``host_s_per_sample`` was measured on, a slug of ``host_cpus.toml`` ("": none, not a measurement)."""

    def __post_init__(self) -> None:
        if self.host_s_per_sample.value < 0:
            raise ConfigError(f"loader {self.kind}: host_s_per_sample={self.host_s_per_sample.value} must be >= 0")
        if self.workers_per_gpu is not None and self.workers_per_gpu < 1:
            raise ConfigError(f"loader {self.kind}: workers_per_gpu={self.workers_per_gpu} must be >= 1")


def get_loader(kind: str, workers_per_gpu: int | None = None) -> Loader:
    """The packaged loader ``kind`` (``loaders.toml``), with ``workers_per_gpu`` loader workers per GPU."""
    if kind not in get_args(LoaderKind):
        raise ConfigError(f"loader={kind!r} is not one of {', '.join(get_args(LoaderKind))}")
    row = loader_table()[kind]
    figure = row["host_s_per_sample"]
    return Loader(kind=kind, host_s_per_sample=Figure(value=float(figure["value"]), source=str(figure["source"])),
                  workers_per_gpu=workers_per_gpu, measured_on=str(row.get("measured_on", "")))


def loader_core_speed(loader: Loader, cluster: Cluster) -> Figure:
    """How many times as fast a core of ``cluster``'s host CPU prepares a sample as the CPU ``loader``'s figure was
    measured on (:func:`plait.hardware.host_cpu.core_speed`)."""
    host = get_host_cpu(cluster.host_cpu) if cluster.host_cpu else None
    return core_speed(host, get_host_cpu(loader.measured_on) if loader.measured_on else None)


def host_cores_per_used_gpu(cluster: Cluster, num_gpus: int) -> float:
    """Host cores each of ``num_gpus`` GPUs has: its node's cores over the node's GPUs the job uses (a job smaller than
    a node leaves the other GPUs' cores to it)."""
    if not cluster.host_cores_per_node:
        raise ConfigError(f"cluster {cluster.name} states no host_cores_per_node; an input pipeline needs it")
    return cluster.host_cores_per_node / min(num_gpus, cluster.gpus_per_node)


def loader_step_s(loader: Loader, samples_per_gpu: float, host_cores: float, core_speed: float = 1.0) -> float:
    """Seconds the loader needs to prepare ``samples_per_gpu`` samples on ``host_cores`` cores, each ``core_speed``
    times as fast as the core its figure was measured on (module docstring)."""
    if loader.host_s_per_sample.value == 0.0:
        return 0.0
    if core_speed <= 0:
        raise ConfigError(f"loader {loader.kind}: core_speed={core_speed} must be > 0")
    workers = host_cores if loader.workers_per_gpu is None else min(host_cores, float(loader.workers_per_gpu))
    return samples_per_gpu * loader.host_s_per_sample.value / (max(workers, 1e-9) * core_speed)


def input_wait_s(step_s: float, loader_s: float) -> float:
    """Seconds a step of ``step_s`` (device and kernel-issuing host) waits for a loader that needs ``loader_s``: the
    step lasts ``max(step, loader)`` (module docstring)."""
    return max(0.0, loader_s - step_s)
