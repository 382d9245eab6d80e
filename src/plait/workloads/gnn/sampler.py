"""Time and bytes of neighbour sampling, by sampler (:mod:`plait.workloads.gnn.cost`).

Samplers:

- ``loop``: one batch at a time (plait's :mod:`plait.run.sampler`; GNNLab's GPU samplers);
- ``dgl``: DGL's GPU sampler in the training loop, one batch at a time, its host stream and synchronizations
  counted (:mod:`plait.workloads.gnn.dgl_gpu_sampler`); what the validated DGL GPU-sampling rows run; costed by
  ``plait estimate --gnn-sampler dgl --gnn-library dgl``, not run by ``plait run``;
- ``matrix``: matrix-based bulk sampling (000-10: Tripathy, Yelick & Buluç, MLSys 2024, Sec. 3-4;
  :mod:`plait.run.bulk_sampler`): ``bulk`` batches at a time, each hop one sparse product ``P = Q A`` for all of
  them; the adjacency ``replicated`` on every rank (no communication) or ``partitioned`` into the ranks' parts'
  rows (each hop, the rows a bulk draws from are fetched from their owners: per peer an int64 count, then the ids
  out, each row's length and its entries back, four all-to-alls in turn, the bulk's batches together).

Work, per batch: the neighbour slots the drawing nodes hold (:attr:`plait.workloads.gnn.sampling.SampledBatch.scanned`)
at the time ``plait calibrate`` measured per slot for each sampler on a CPU (:attr:`Efficiency.sampling_ns_per_slot`,
:attr:`Efficiency.matrix_sampling_ns_per_slot`; the measured figure holds the sampler's fixed costs per hop at the
calibration's batch). On a GPU, whose samplers plait has not measured: each drawn neighbour a random read of one
32-byte sector of the adjacency (NVIDIA, *CUDA C++ Best Practices Guide*, "Coalesced Access to Global Memory": the
smallest transaction) and each sampled node two more (its row offsets), at the HBM's streaming rate, plus one kernel
launch per operation: :data:`LOOP_KERNELS_PER_HOP` per batch and hop for a loop sampler,
:data:`BULK_KERNELS_PER_HOP` per bulk and hop and :data:`BULK_KERNELS_PER_BATCH` per batch and hop for a bulk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from plait.cost.links import collective_s
from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.workloads.gnn.compute import INDEX_BYTES
from plait.workloads.gnn.sampling import SampledBatch
from plait.workloads.gnn.sectors import SECTOR_BYTES

COUNT_BYTES = 8
"""The int64 count each rank sends each peer before the ids it asks for."""
LOOP_KERNELS_PER_HOP = 33
"""Operations one hop of :func:`plait.run.sampler.sample` runs (counted in its code, each torch operation one
kernel; assumed the same for GNNLab's GPU sampler, whose kernels plait has not counted; DGL's are counted in
:mod:`plait.workloads.gnn.dgl_gpu_sampler`)."""
BULK_KERNELS_PER_HOP = 28
"""Operations one hop of :func:`plait.run.bulk_sampler.sample_bulk` runs once for the whole bulk (counted)."""
BULK_KERNELS_PER_BATCH = 11
"""Operations one hop of :func:`plait.run.bulk_sampler.sample_bulk` runs per batch of the bulk (counted)."""
SAMPLERS = ("loop", "matrix", "dgl")


@dataclass(frozen=True, kw_only=True)
class Sampler:
    """How batches are sampled (module docstring)."""

    kind: Literal["loop", "matrix", "dgl"] = "loop"
    bulk: int = 1
    partitioned: bool = False
    """The matrix sampler's adjacency: each rank holds only its part's rows."""

    def label(self) -> str:
        if self.kind != "matrix":
            return self.kind
        return f"matrix:bulk={self.bulk}" + (",adjacency=partitioned" if self.partitioned else "")


LOOP = Sampler()
"""One batch at a time: the default."""
DGL_GPU = Sampler(kind="dgl")
"""DGL's GPU sampler in the training loop (module docstring)."""


def parse_sampler(text: str) -> Sampler:
    """``loop``, ``dgl`` or ``matrix[:bulk=K][,adjacency=replicated|partitioned]``; one-line errors name the value."""
    kind, _, options = text.partition(":")
    if kind not in SAMPLERS:
        raise ConfigError(f"--gnn-sampler {text!r}: the sampler must be one of {', '.join(SAMPLERS)}")
    fields: dict[str, str] = {}
    for item in filter(None, options.split(",")):
        key, sep, value = item.partition("=")
        if not sep or key not in ("bulk", "adjacency"):
            raise ConfigError(f"--gnn-sampler {text!r}: options are bulk=K and adjacency=replicated|partitioned")
        fields[key] = value
    if kind != "matrix" and fields:
        raise ConfigError(f"--gnn-sampler {text!r}: bulk and adjacency need the matrix sampler")
    try:
        bulk = int(fields.get("bulk", "1"))
    except ValueError:
        raise ConfigError(f"--gnn-sampler {text!r}: bulk={fields['bulk']} must be a whole number") from None
    adjacency = fields.get("adjacency", "replicated")
    if bulk < 1 or adjacency not in ("replicated", "partitioned"):
        raise ConfigError(f"--gnn-sampler {text!r}: bulk={bulk} must be >= 1 and adjacency replicated or partitioned")
    return Sampler(kind=kind, bulk=bulk, partitioned=adjacency == "partitioned")  # type: ignore[arg-type]


def sampling_time_s(sampled: SampledBatch, cluster: Cluster, sampler: Sampler, hbm: float, world: int) -> float:
    """Seconds to sample one batch (module docstring), the exchange of a partitioned adjacency included."""
    eff = cluster.accelerator.efficiency
    hops = len(sampled.scanned)
    ns = (eff.matrix_sampling_ns_per_slot if sampler.kind == "matrix" else eff.sampling_ns_per_slot).value
    if ns > 0:
        work = sum(sampled.scanned) * ns * 1e-9
    else:
        kernels = (LOOP_KERNELS_PER_HOP if sampler.kind == "loop"
                   else BULK_KERNELS_PER_HOP / sampler.bulk + BULK_KERNELS_PER_BATCH)
        work = ((sampled.sampled_edges + 2 * sampled.nodes) * SECTOR_BYTES / hbm
                + hops * kernels * eff.kernel_launch_us.value * 1e-6)
    return work + (adjacency_exchange_s(sampled, cluster, sampler.bulk, world) if sampler.partitioned else 0.0)


def adjacency_exchange_s(sampled: SampledBatch, cluster: Cluster, bulk: int, world: int) -> float:
    """Per batch, the four all-to-alls of each hop of a bulk over a partitioned adjacency (module docstring): a
    rank asks for its remote drawing rows and serves as many of its own (ranks alike)."""
    if world < 2:
        return 0.0
    total = 0.0
    for hop, slots in enumerate(sampled.remote_scanned):
        rows = sampled.remote_nodes[hop]
        for sent in (COUNT_BYTES * (world - 1), rows * INDEX_BYTES, rows * INDEX_BYTES, slots * INDEX_BYTES):
            total += float(collective_s(cluster, "all_to_all", world, 1, bulk * sent * world / (world - 1)))
    return total / bulk


def rank_sampling_bytes(rows: list[list[float]], entries: list[list[float]], rank: int) -> float:
    """Bytes ``rank`` sends in one hop of a bulk sampled over a partitioned adjacency, ``rows[r][p]`` being the
    drawing rows rank ``r`` asks part ``p`` for and ``entries[r][p]`` their neighbour slots: an int64 count to each
    peer, the int64 ids it asks for, and the int64 length and entries of each row it is asked for."""
    peers = len(rows) - 1
    asked = sum(n for p, n in enumerate(rows[rank]) if p != rank)
    served = sum(row[rank] + slots[rank] for r, (row, slots) in enumerate(zip(rows, entries, strict=True)) if r != rank)
    return peers * COUNT_BYTES + (asked + served) * INDEX_BYTES
