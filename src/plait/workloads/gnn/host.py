"""The host side of a GNN training step: neighbour sampling by a loader's worker processes or threads on host CPU
cores, the slicing of the batch's features in host memory, their copy to the GPU, and how these run beside the
trainer (the loaders of ``data/loaders.toml``).

- **sampling**: ``e`` sampled edges per batch (:class:`plait.workloads.gnn.sampling.SampledBatch`) at ``r`` edges
  per second per worker, ``w`` workers each on a core of its own: a batch every ``e / (r w)`` seconds. ``w`` is the
  loader's workers, at most the node's host cores over the GPUs training on it (:attr:`Cluster.host_cores_per_node`).
  ``r`` is derived from a published measurement (:func:`loader_rates`). Where the measurement sweeps the workers, a
  part of each batch that does not divide among them is derived too (Amdahl's law), and the pool takes it on every
  batch;
- **slicing**: the batch's feature rows gathered from the feature table, in the training loop (``trainer``: read
  and written at the host memory bandwidth of the GPU's share of its node) or by the workers (``workers``: each
  gathers its own batch on its one thread, so no faster than one core gathers rows,
  :func:`plait.workloads.gnn.staging.core_gather_s`, and the pool no faster than the memory its node's training GPUs'
  pools share reads and writes them, :attr:`HostStep.pool_s`);
- **transfer**: the sliced rows and the batch's blocks (their index tensors, :func:`index_bytes`) copied over the GPU's
  PCIe link, in the loop (``serial``) or on a side stream while the previous batch trains (``pipelined``);
- a loop that slices into a new tensor and copies it from pageable memory (``copy_from = "pageable"``) also faults
  the new tensor's pages in and stages the copy through one core (:mod:`plait.workloads.gnn.staging`).

The loader's workers run ahead of the training loop (torch ``DataLoader`` workers keep ``prefetch_factor`` batches
each in flight: torch/utils/data/dataloader.py; SALIENT's threads fill a queue), so the step is the slower of the
workers and the loop; what the loop does itself adds to its device work:
``step = max(pool, trainer [+ slicing] [+ transfer], [transfer])``, the pool's time per batch
``max(sampling [+ slicing], memory)`` (:attr:`HostStep.pool_s`). An epoch starts with no batch
ready (torch's ``DataLoader`` starts its workers at each epoch's ``iter``; ``persistent_workers`` is off by
default): the workers deliver in waves, one batch each per worker-batch time, and the loop waits for the first
(:meth:`HostStep.epoch_s`); with fewer steps than workers, the epoch is one worker's batch and the loop.
"""

from __future__ import annotations

import functools
import math
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Literal

from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.workloads.gnn.compute import GnnLibrary
from plait.workloads.gnn.model import GraphStats
from plait.workloads.gnn.sampling import SampledBatch, degree_classes, sample_batch
from plait.workloads.gnn.staging import core_gather_s, first_touch_s, staged_copy_s


@dataclass(frozen=True, kw_only=True)
class Reference:
    """A published epoch time of a loader-bound run, from which the per-core rate follows."""

    dataset: str
    fanouts: tuple[int, ...]
    batch: int
    workers: int
    epoch_s: float
    source: str
    sweep: tuple[tuple[int, float], ...] = ()
    """More (workers, epoch seconds) points of the same run, where the source timed it with other worker counts."""

    def points(self) -> list[tuple[int, float]]:
        """Every (workers, epoch seconds) point of the run."""
        return [(self.workers, self.epoch_s), *self.sweep]


@dataclass(frozen=True)
class LoaderRates:
    """Sampled edges per second of a loader's pool (:func:`loader_rates`)."""

    per_worker: float
    """Each worker's rate on the part of a batch the workers share out."""
    serial: float
    """The rate of the part of every batch that does not divide among the workers (``inf``: none measured)."""


@dataclass(frozen=True, kw_only=True)
class HostLoader:
    """A host-CPU loader (module docstring)."""

    name: str
    label: str
    library: GnnLibrary
    """Whose sampler (the library the trainer is estimated with in :mod:`plait.workloads.gnn.validate`)."""
    hop_targets: Literal["reached", "new"]
    """The nodes that draw at each hop, and so the targets of each hop's block: every node the batch has reached so
    far (``reached``: DGL's ``MultiLayerNeighborSampler`` and PyG's ``NeighborSampler``,
    :func:`plait.workloads.gnn.sampling.sample_batch`'s ``redraw``) or only the nodes the previous hop reached
    (``new``: PyG's ``NeighborLoader``); ``data/loaders.toml`` cites each loader's code."""
    slicing: Literal["trainer", "workers"]
    transfer: Literal["serial", "pipelined"]
    source: str
    reference: Reference
    copy_from: Literal["pinned", "pageable"] = "pinned"
    """Where the loop copies the sliced rows from: a fresh pageable tensor (:mod:`plait.workloads.gnn.staging`) or
    pinned memory."""
    index_bytes_per_edge: int
    """Bytes of index tensors per sampled edge that the loop copies to the GPU beside the rows (the blocks' column ids
    and edge ids, as the loader's code moves them; ``data/loaders.toml``)."""
    index_bytes_per_target: int
    """The same per node that draws at a hop (a CSR block's row pointer)."""


@dataclass(frozen=True, kw_only=True)
class HostStep:
    """One step of a loader beside its trainer, in seconds."""

    sampling_s: float
    """One batch, per worker pool (the batch time of one worker over the workers)."""
    slicing_s: float
    transfer_s: float
    trainer_s: float
    """The trainer's own step (device work, gradient all-reduce, optimizer)."""
    loader: HostLoader

    workers: int
    """Workers sampling at once, each a batch of its own."""
    memory_s: float = 0.0
    """Where the workers slice: one batch's rows read and written at the host memory bandwidth the pool shares
    (:func:`pool_memory_bytes_per_s`), a floor on the pool's time per batch however many workers gather at once."""
    serial_s: float = 0.0
    """The part of each batch's sampling that does not divide among the workers (:attr:`LoaderRates.serial`)."""

    @property
    def batch_s(self) -> float:
        """One worker's time for one batch: its share of the sampling, and of the slicing where workers slice."""
        return self.workers * (self.sampling_s + (self.slicing_s if self.loader.slicing == "workers" else 0.0))

    @property
    def loop_s(self) -> float:
        """The training loop's time per step: the trainer, and the slicing and the copy where the loop does them."""
        loop = self.trainer_s + (self.slicing_s if self.loader.slicing == "trainer" else 0.0)
        return loop + self.transfer_s if self.loader.transfer == "serial" else max(loop, self.transfer_s)

    @property
    def pool_s(self) -> float:
        """The worker pool's time per batch in steady state: its workers' own time over the workers, or the host
        memory's time for one batch's slicing (:attr:`memory_s`), the slower. The pool is a closed system of
        ``workers`` jobs, each cycling through its own core (sampling, then gathering at one core's rate: no
        queueing) and the shared memory (``memory_s`` of demand a batch), so its throughput is at most
        ``min(workers / batch_s, 1 / memory_s)`` (Lazowska et al., "Quantitative System Performance", 1984,
        section 5.2, asymptotic bounds: ``X(N) <= min(N / (D + Z), 1 / D_max)``). A worker samples while the others
        gather, so the sampling is not added to the memory's time. The part that does not divide (:attr:`serial_s`)
        adds to each batch, as Amdahl's law has it."""
        return max(self.batch_s / self.workers + self.serial_s, self.memory_s)

    @property
    def step_s(self) -> float:
        """The slower of the workers and the training loop, in steady state (module docstring)."""
        return max(self.pool_s, self.loop_s)

    def epoch_s(self, steps: int) -> float:
        """``steps`` steps from an empty pipeline: the workers deliver their batches in waves of ``workers``, one
        wave per ``workers`` pool times (at least :attr:`batch_s`), and the loop cannot start before the first wave
        (a pipeline's fill)."""
        waves, wave_s = -(-steps // self.workers), self.workers * self.pool_s
        return max(waves * wave_s + self.loop_s, wave_s + steps * self.loop_s)


@functools.cache
def loaders() -> dict[str, HostLoader]:
    """The loaders of ``data/loaders.toml``."""
    data = tomllib.loads(resources.files("plait.workloads.gnn").joinpath("data/loaders.toml").read_text())
    out = {}
    for name, raw in data.items():
        ref = raw["reference"]
        if raw.get("copy_from", "pinned") not in ("pinned", "pageable"):
            raise ConfigError(f"loader {name}: copy_from={raw['copy_from']!r} must be pinned or pageable")
        if raw["hop_targets"] not in ("reached", "new"):
            raise ConfigError(f"loader {name}: hop_targets={raw['hop_targets']!r} must be reached or new")
        out[name] = HostLoader(
            name=name,
            label=raw["label"],
            library=raw["library"],
            hop_targets=raw["hop_targets"],
            slicing=raw["slicing"],
            transfer=raw["transfer"],
            source=raw["source"],
            copy_from=raw.get("copy_from", "pinned"),
            index_bytes_per_edge=raw["index_bytes_per_edge"],
            index_bytes_per_target=raw["index_bytes_per_target"],
            reference=Reference(
                dataset=ref["dataset"],
                fanouts=tuple(ref["fanouts"]),
                batch=ref["batch"],
                workers=ref["workers"],
                epoch_s=ref["epoch_s"],
                source=ref["source"],
                sweep=tuple((int(n), float(t)) for n, t in ref.get("sweep", ())),
            ),
        )
    return out


def loader_rates(loader: HostLoader, graphs: dict[str, GraphStats]) -> LoaderRates:
    """The pool's rates from its reference run: the run's expected sampled edges per epoch (its batches on its
    dataset, drawn as the loader's library draws them) over its epoch time. One point: all of it divides among the
    workers (a lower bound of their rate: the epoch also holds the training). A sweep of worker counts: the epoch as
    Amdahl's law has it, ``T(N) = T_serial + T_parallel / N`` (Amdahl, "Validity of the single processor approach to
    achieving large scale computing capabilities", AFIPS 1967), fitted by least squares on ``1 / N``; a fitted
    serial part below zero is taken as none."""
    ref = loader.reference
    if ref.dataset not in graphs:
        raise ConfigError(f"loader {loader.name}: reference dataset {ref.dataset!r} has no statistics")
    g = graphs[ref.dataset]
    batch = sample_batch(degree_classes(g), ref.fanouts, ref.batch, 1, 0.0, redraw=loader.hop_targets == "reached")
    edges = batch.sampled_edges * -(-g.train_nodes // ref.batch)
    parallel_s, serial_s = amdahl_fit(ref.points())
    return LoaderRates(per_worker=edges / parallel_s, serial=edges / serial_s if serial_s > 0 else math.inf)


def amdahl_fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(parallel, serial) seconds of ``T(N) = serial + parallel / N`` through (workers, seconds) ``points`` by least
    squares (:func:`loader_rates`); one point, or a serial part fitted below zero: all parallel, through the points."""
    if len(points) == 1:
        return points[0][0] * points[0][1], 0.0
    xs, ys = [1.0 / n for n, _ in points], [t for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    if slope > 0 and my - slope * mx >= 0:
        return slope, my - slope * mx
    return sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs), 0.0


def usable_workers(workers: int, cluster: Cluster, gpus_on_node: int) -> int:
    """The loader's workers, at most the node's cores over the GPUs training on it (all when the cores are not
    stated)."""
    if workers < 1 or gpus_on_node < 1:
        raise ConfigError(f"workers={workers} and gpus_on_node={gpus_on_node} must be >= 1")
    cores = cluster.host_cores_per_node
    return workers if cores == 0 else max(1, min(workers, cores // gpus_on_node))


def index_bytes(sampled: SampledBatch, loader: HostLoader) -> float:
    """Bytes of the batch's blocks the loop copies to the GPU: :attr:`HostLoader.index_bytes_per_edge` per sampled
    edge and :attr:`HostLoader.index_bytes_per_target` per drawing node (:attr:`HostLoader.hop_targets`)."""
    hops = range(len(sampled.edges))
    if loader.hop_targets == "new":
        targets = sum(sampled.new_nodes[h] for h in hops)
    else:
        targets = sum(sampled.within(h) for h in hops)
    return loader.index_bytes_per_edge * sampled.sampled_edges + loader.index_bytes_per_target * targets


def pool_memory_bytes_per_s(cluster: Cluster, gpus_on_node: int) -> float:
    """Host memory bandwidth one GPU's worker pool may use: its node's (the per-GPU share times the node's GPUs)
    over the GPUs training on the node, whose pools gather from the same memory at once; a GPU training alone on
    its node has all of it."""
    if gpus_on_node < 1:
        raise ConfigError(f"gpus_on_node={gpus_on_node} must be >= 1")
    node = cluster.host_memory_bytes_per_s_per_gpu * cluster.gpus_per_node
    return node / min(gpus_on_node, cluster.gpus_per_node)


def host_step(
    sampled: SampledBatch,
    loader: HostLoader,
    rates: LoaderRates,
    workers: int,
    cluster: Cluster,
    features: int,
    feature_bytes: int,
    trainer_s: float,
    loop_threads: int = 1,
    *,
    gpus_on_node: int,
) -> HostStep:
    """The step of ``loader``'s ``workers`` (already bounded by the cores) feeding a trainer whose own step is
    ``trainer_s`` (module docstring); features of ``feature_bytes`` bytes each, ``features`` per node; a pageable
    copy's new tensor faulted in from ``loop_threads`` threads; ``gpus_on_node`` GPUs training on the node."""
    rows_bytes = sampled.nodes * features * feature_bytes
    if loader.slicing == "workers":  # each its own batch on its one core, the pool on shared memory (pool_s)
        memory_s = 2 * rows_bytes / pool_memory_bytes_per_s(cluster, gpus_on_node)
        slicing_s = core_gather_s(rows_bytes, feature_bytes * features) / workers
    else:  # the loop reads and writes them at its GPU's share of the host memory
        memory_s = 0.0
        slicing_s = 2 * rows_bytes / cluster.host_memory_bytes_per_s_per_gpu
    link = cluster.accelerator.pcie_bandwidth_gb_per_s * 1e9
    transfer_s = rows_bytes / link
    if loader.copy_from == "pageable":
        slicing_s += first_touch_s(rows_bytes, loop_threads) / (workers if loader.slicing == "workers" else 1)
        transfer_s = staged_copy_s(rows_bytes, cluster)
    transfer_s += index_bytes(sampled, loader) / link  # the blocks, pinned by the DataLoader or the sampler
    return HostStep(
        sampling_s=sampled.sampled_edges / (rates.per_worker * workers),
        serial_s=sampled.sampled_edges / rates.serial,
        slicing_s=slicing_s,
        transfer_s=transfer_s,
        trainer_s=trainer_s,
        loader=loader,
        workers=workers,
        memory_s=memory_s,
    )
