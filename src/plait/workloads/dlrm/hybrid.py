"""A step of NVIDIA DeepLearningExamples' DLRM for PyTorch, its hybrid parallelism (DeepLearningExamples
``PyTorch/Recommendation/DLRM``, ``dlrm/model/distributed.py`` and ``dlrm/utils/distributed.py`` @36f3b1b6 /
@115867b5): the bottom part model-parallel, the top part data-parallel.

- **Bottom part, model-parallel over the global batch ``G``.** The bottom MLP runs on rank 0 alone, on every sample
  of the step (``get_device_mapping``: "Bottom MLP running on device 0"); each embedding table lives whole on one
  rank and looks up all ``G`` samples' ids there. Above 4 GPUs rank 0 holds no table ("make sure the one with
  bottom mlp has no embeddings"): the tables are spread over the other ranks by ``distribute_to_buckets``, a
  greedy pass over the tables by falling row count that puts each into the bucket of least rows so far, a bucket
  closed once it holds ``ceil(T / buckets)`` tables (:func:`buckets`).
- **To the top part**: one all-to-all each way (``BottomToTop``): every rank sends each other rank that rank's
  ``B = G / W`` samples of its vectors (the bottom MLP's output counts as one vector), ``B n_r d`` elements, and
  receives its own samples of everyone's; the backward sends the gradients back.
- **Top part, data-parallel**: the interaction and the top MLP on ``B`` samples per rank
  (:func:`plait.workloads.dlrm.dense.top_s`), its gradients all-reduced in fp32.
- **Embedding kernels**: per id the row read forward and, with the SGD the example trains with
  (``torch.optim.SGD`` over every parameter, ``dlrm/scripts/main.py``), the row read and written by its update;
  the pooled output written forward and its gradient read back, in the table's type: ``ids 3 d e + 2 samples d e``
  bytes (no optimizer state: the row-wise AdaGrad of TorchRec's kernel, :mod:`plait.workloads.dlrm.cost`, keeps
  one).
- **The bottom output assembled** (``DlrmBottom.forward``, ``dlrm/nn/parts.py`` @2de29455): in mixed precision each
  fp32 table's output is cast to fp16 (``x.half()``: a read of 4 and a write of 2 bytes an element; its backward
  casts the gradient back, 2 and 4), then a rank's vectors are concatenated (``torch.cat``: a read and a write of
  each element in the activations' type; its backward hands out views, no copy).

The step is the busiest rank's bottom part, the all-to-alls, the top part and the all-reduce, one after another (the
example's training loop overlaps none of them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from plait.cost.compute import memory_bytes_per_s
from plait.cost.links import collective_s
from plait.hardware.cluster import Cluster
from plait.workloads.dlrm.dense import ACTIVATION_BYTES, bottom_s, top_s
from plait.workloads.dlrm.model import DlrmSpec


def buckets(rows: list[int], count: int) -> list[list[int]]:
    """Table indices per bucket as ``distribute_to_buckets`` fills ``count`` buckets (module docstring): tables by
    falling rows (ties in table order), each to the open bucket of fewest rows so far (the first such bucket in its
    order of least rows), a bucket closed at ``ceil(T / count)`` tables."""
    cap = math.ceil(len(rows) / count)
    order = sorted(range(len(rows)), key=lambda i: -rows[i])
    open_, closed = [[] for _ in range(count)], []  # type: list[list[int]], list[list[int]]
    while order:
        bucket = open_[0]
        bucket.append(order.pop(0))
        if len(bucket) == cap:
            closed.append(open_.pop(0))
        open_.sort(key=lambda b: sum(rows[i] for i in b))
    return closed + open_


def device_tables(rows: list[int], gpus: int) -> list[list[int]]:
    """Tables per rank (rank 0 first): above 4 GPUs rank 0 holds none (module docstring)."""
    if gpus > 4:
        return [[], *buckets(rows, gpus - 1)]
    return buckets(rows, gpus)


@dataclass(frozen=True)
class HybridStep:
    """One step's parts (seconds); ``step_s`` their sum."""

    bottom_s: float
    """The busiest rank's bottom part (bottom MLP and lookups)."""
    all_to_all_s: float
    top_s: float
    all_reduce_s: float

    @property
    def step_s(self) -> float:
        return self.bottom_s + self.all_to_all_s + self.top_s + self.all_reduce_s


def hybrid_step(spec: DlrmSpec, cluster: Cluster, gpus: int, global_batch: int, precision: str) -> HybridStep:
    """A step of ``global_batch`` samples on ``gpus`` ranks of ``cluster`` (module docstring)."""
    acc, e = cluster.accelerator, ACTIVATION_BYTES[precision]
    tables = spec.deep_tables
    placed = device_tables([t.rows for t in tables], gpus)
    vectors = [len(held) + (rank == 0) for rank, held in enumerate(placed)]  # the bottom MLP's output is one
    hbm = memory_bytes_per_s(acc)
    busiest = 0.0
    for rank, held in enumerate(placed):
        moved = 0.0
        for t in (tables[i] for i in held):
            elements = global_batch * t.dim
            moved += global_batch * t.pooling * 3 * t.dim * t.element_bytes + 2 * elements * t.element_bytes
            if t.element_bytes != e:  # cast to the activations' type, and its gradient back
                moved += 2 * elements * (t.element_bytes + e)
        if vectors[rank] > 1:
            moved += 2 * global_batch * vectors[rank] * spec.dense_width * e  # torch.cat of the rank's vectors
        part = moved / hbm + (bottom_s(spec, acc, global_batch, precision) if rank == 0 else 0.0)
        busiest = max(busiest, part)
    batch = global_batch // gpus
    a2a = reduce = 0.0
    if gpus > 1:
        d = spec.dense_width
        sent = max(v * (gpus - 1) for v in vectors) * batch * d * e
        received = (sum(vectors) - min(vectors)) * batch * d * e
        spread = gpus / (gpus - 1)  # all_to_all_s takes bytes spread over all ranks
        a2a = 2 * float(collective_s(cluster, "all_to_all", gpus, 1, max(sent, received) * spread))
        reduce = float(collective_s(cluster, "all_reduce", gpus, 1, 4.0 * spec.top_mlp_params()))
    return HybridStep(busiest, a2a, top_s(spec, acc, batch, precision), reduce)
