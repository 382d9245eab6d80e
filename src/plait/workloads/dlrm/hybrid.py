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
- **Embedding kernels** (one-hot ids, as the example's tables are): per id the row read forward and the pooled
  output written; the example keeps each rank's tables as one joint table (``JointSparseEmbedding``, ``dist_main.py``
  / ``main.py``'s ``embedding_type``) whose backward hands ``torch.optim.SGD`` (``dlrm/scripts/main.py``) a sparse
  gradient of one fp32 row per id, which ``param.add_(grad, alpha=-lr)`` applies as PyTorch's
  ``add_out_dense_sparse_cuda``: a scaled copy of the values (``values = values.mul(value)``, "NB: Purposely not
  inplace!"; any learning rate but 1) and an ``index_add_`` that reads them and reads and writes each row
  (aten/src/ATen/native/sparse/cuda/SparseCUDATensorMath.cu; assumed unchanged in the containers' PyTorch builds):
  ``5 ids d t`` bytes for a table of ``t`` bytes an element. No optimizer state (the row-wise AdaGrad of TorchRec's
  kernel, :mod:`plait.workloads.dlrm.cost`, keeps one).
- **The gather's types.** Across GPUs (``joint_sparse``, ``dlrm/cuda_ext/sparse_embedding.py``) the gather runs in
  the table's type (``amp.float_function``) and, in mixed precision, each fp32 table's output is cast to fp16
  (``x.half()`` in ``DlrmBottom.forward``, ``dlrm/nn/parts.py`` @2de29455: a read of 4 and a write of 2 bytes an
  element; its backward casts the gradient back, 2 and 4), the sparse gradient a view of that. On one GPU the example
  takes its fused kernel for 26 tables of width 128 (``joint_fused``: ``validate_flags`` in ``dlrm/scripts/main.py``
  @4154bda6, the default of ``main.py`` before), which writes the activations' type directly and whose backward
  copies the gradient into the fp32 values (``gradient_copy_kernel``, ``dlrm/cuda_src/gather_gpu_fused.cu``): a read
  in the activations' type and a write in the table's, in every precision.
- **The bottom output assembled**: a rank's vectors concatenated (``torch.cat``: a read and a write of each element
  in the activations' type; its backward hands out views, no copy).
- **``BottomToTop``'s copies** (``dlrm/model/distributed.py``, the same at all three releases): forward, the
  received buffers concatenated along the features (``torch.cat(bottom_output_buffer, dim=1)``); backward, the
  gradient split by rank along the features and each part made contiguous before the all-to-all (``t.contiguous()``):
  a read and a write of every rank's ``B`` samples' vectors each way.

- **Loss scaling by ``torch.cuda.amp.GradScaler``** (the 21.10 loop, ``weight_update`` in ``dlrm/scripts/main.py``
  @4154bda6: ``scaler.step(mlp_optimizer)``, ``scaler.unscale_(embedding_optimizer)``; ``GradScaler(enabled=amp)``):
  ``unscale_`` takes a sparse gradient's ``_values()`` and multiplies them in place by the inverse scale while
  checking them for infinities (``_amp_foreach_non_finite_check_and_unscale_``; PyTorch
  ``torch/cuda/amp/grad_scaler.py`` ``_unscale_grads_``), a read and a write of each fp32 row looked up, ``2 ids d t``
  bytes a table; ``step`` reads the overflow flag back (``.item()`` on ``found_inf``) before the MLP optimizer's step,
  one synchronization (:func:`plait.cost.host.sync_s`). The releases before it scale the loss by a constant folded
  into the learning rate (``scaled_lr = FLAGS.lr / FLAGS.loss_scale``, ``dist_main.py`` @4e764dcd and @15af494a) and
  unscale nothing of the tables.

The step is the busiest rank's bottom part, the all-to-alls, the top part and the all-reduce, one after another (the
example's training loop overlaps none of them), and the loss scaler's synchronization.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from plait.cost.compute import memory_bytes_per_s
from plait.cost.host import sync_s
from plait.cost.links import collective_s
from plait.hardware.cluster import Cluster
from plait.workloads.dlrm.dense import ACTIVATION_BYTES, bottom_s, top_s
from plait.workloads.dlrm.model import DlrmSpec, Table


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
    """The all-to-alls each way and ``BottomToTop``'s copies around them."""
    top_s: float
    all_reduce_s: float
    scaler_sync_s: float = 0.0
    """The loss scaler's read of its overflow flag (``GradScaler.step``)."""

    @property
    def step_s(self) -> float:
        return self.bottom_s + self.all_to_all_s + self.top_s + self.all_reduce_s + self.scaler_sync_s


FUSED_TABLES, FUSED_WIDTH = 26, 128
"""Tables, and the width of every one, for which the example's one-GPU runs take its fused gather (module
docstring)."""


def lookup_bytes(table: Table, samples: int, activation_bytes: int, fused: bool, unscaled: bool = False) -> float:
    """Bytes a step's lookups and SGD update of ``table`` move for ``samples`` samples (module docstring): the rows
    read, the output written, the gather's casts or its fused backward copy, the update's ``5 ids d t``, and with
    ``unscaled`` the loss scaler's unscaling of the sparse gradient, ``2 ids d t``."""
    t, elements = table.element_bytes, samples * table.dim
    looked_up = samples * table.pooling * table.dim  # elements of the rows looked up (one-hot: one per sample)
    moved = looked_up * t + elements * (activation_bytes if fused else t) + (7 if unscaled else 5) * looked_up * t
    if fused:  # the gradient copied into the fp32 values
        moved += looked_up * (activation_bytes + t)
    elif t != activation_bytes:  # cast to the activations' type, and its gradient back
        moved += 2 * elements * (t + activation_bytes)
    return moved


def hybrid_step(spec: DlrmSpec, cluster: Cluster, gpus: int, global_batch: int, precision: str,
                grad_scaler: bool = False) -> HybridStep:
    """A step of ``global_batch`` samples on ``gpus`` ranks of ``cluster`` (module docstring); ``grad_scaler``: a
    mixed-precision (``fp16``) step's loss is scaled by ``torch.cuda.amp.GradScaler``."""
    acc, e = cluster.accelerator, ACTIVATION_BYTES[precision]
    scaled = grad_scaler and precision == "fp16"
    tables = spec.deep_tables
    placed = device_tables([t.rows for t in tables], gpus)
    vectors = [len(held) + (rank == 0) for rank, held in enumerate(placed)]  # the bottom MLP's output is one
    fused = (gpus == 1 and len(tables) == FUSED_TABLES
             and all(d == FUSED_WIDTH for d in (spec.dense_width, *(t.dim for t in tables))))
    hbm = memory_bytes_per_s(acc)
    busiest = 0.0
    for rank, held in enumerate(placed):
        moved = sum(lookup_bytes(tables[i], global_batch, e, fused, scaled) for i in held)
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
        copies = 4 * batch * sum(vectors) * d * e / hbm  # BottomToTop's cat forward, contiguous parts backward
        a2a = 2 * float(collective_s(cluster, "all_to_all", gpus, 1, max(sent, received) * spread)) + copies
        reduce = float(collective_s(cluster, "all_reduce", gpus, 1, 4.0 * spec.top_mlp_params()))
    return HybridStep(busiest, a2a, top_s(spec, acc, batch, precision), reduce, sync_s(cluster) if scaled else 0.0)
