"""Train a DLRM plan on TorchRec: plait's table placements as TorchRec's sharding plan, run by
``DistributedModelParallel`` on torch.distributed (gloo on CPU), with every byte of its embedding collectives
counted.

Each rank builds TorchRec's own DLRM (``torchrec.models.dlrm.DLRMTrain``: sparse arch, dense arch, interaction,
over arch; binary cross-entropy on the click logit; a ``cat`` DLRM or Wide & Deep from the same parts:
:mod:`plait.workloads.dlrm.arch`) on the meta device, shards it with
:func:`plait.workloads.dlrm.torchrec.sharding_plan` and copies in the weights of a full model built from the same seed, so
that a single process (``--reference``) starts from the same point. Embedding tables are updated by FBGEMM's fused
optimizer in the backward pass; the dense part by the same optimizer through DDP. TorchRec divides each embedding
gradient by the world size on its way back (``torchrec.distributed.comm_ops.GRADIENT_DIVISION``, on by default) and
DDP averages the dense ones, so a step equals one of a single process on the global batch.

Synthetic batches (no downloads): every sample carries ``pooling`` ids of each table (multi-hot when above 1; a
whole number is required: the counted bytes then equal the prediction exactly), drawn uniformly; for a table sharded by rows, each rank's ids
fall in turn into each shard's rows (``i``-th id in the ``i mod k``-th of ``k`` blocks), the uniform spread the cost
model assumes (:mod:`plait.workloads.dlrm.cost`), met exactly when a rank's ids of the table are a multiple of ``k``.

Counting: while a step runs, the torch.distributed collectives TorchRec calls (``all_to_all_single``,
``reduce_scatter_tensor``, ``all_gather_into_tensor``) are wrapped to add the bytes this rank sends to its peers, by
kind: pooled embeddings in the forward pass and their gradients in the backward (floating point), ids and lengths
(integer, with split sizes), and the split-size headers (integer, equal splits); with 2D sparse groups
(``--sparse-group``, :mod:`plait.workloads.dlrm.two_d`), also the bytes each rank all-reduces across the replicas
when the step ends. DDP's all-reduce of the dense gradients runs in C++ and is not counted.

Rank 0 writes a JSON file (:func:`plait.run.gloo_job.run_job`): each step's global loss (the mean of the ranks'
losses) and wall time, and each rank's counted bytes of the first step.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from plait.errors import ConfigError
from plait.run.config import read_config
from plait.run.gloo_job import run_job
from plait.run.workload_configs import DlrmConfig
from plait.workloads.dlrm.arch import ConcatRecModel
from plait.workloads.dlrm.cost import Placement
from plait.workloads.dlrm.model import DlrmSpec, read_dlrm
from plait.workloads.dlrm.predict import parse_placements
from plait.workloads.dlrm.torchrec import embedding_bags, sharding_plan
from plait.workloads.dlrm.two_d import collection, counted_sync, group_rank

SPARSE_PATH = "model.sparse_arch.embedding_bag_collection"
"""The embedding collection's path in ``DLRMTrain``: the key of the sharding plan."""
LEARNING_RATE = 0.05
KINDS = ("pooled_forward", "pooled_backward", "inputs", "headers", "replica_sync")


def build(spec: DlrmSpec, device: str) -> Any:
    """TorchRec's DLRM of ``spec`` (module docstring) on ``device``; a ``cat`` DLRM or Wide & Deep from TorchRec's
    parts (:mod:`plait.workloads.dlrm.arch`)."""
    from torchrec.models.dlrm import DLRM, DLRMTrain

    if spec.interaction == "cat":
        return DLRMTrain(ConcatRecModel(spec, embedding_bags(spec, device), torch.device(device)))  # type: ignore[arg-type]
    dlrm = DLRM(embedding_bags(spec, device), spec.dense_features, list(spec.bottom_mlp), list(spec.top_mlp),
                dense_device=torch.device(device))
    return DLRMTrain(dlrm)


def check_runnable(spec: DlrmSpec, placements: list[Placement], batch: int) -> None:
    """One-line refusals of what this runner cannot train exactly."""
    for t in spec.tables:
        if t.pooling != int(t.pooling):
            raise ConfigError(f"table {t.name} pooling={t.pooling} must be a whole number of ids per sample to run "
                              "(synthetic batches give every sample the same count)")
    if batch < 1:
        raise ConfigError(f"batch={batch} samples per rank must be >= 1")
    by_rows = {p.table for p in placements if p.sharding in ("row_wise", "table_row_wise")}
    means = [t.name for t in spec.tables if t.name in by_rows and t.pooling_mode == "mean"]
    multi = [t.name for t in spec.tables if t.name not in by_rows and t.pooling > 1]
    if means and multi:  # TorchRec would divide the multi-hot ones too (plait.workloads.dlrm.cost.rows_ok)
        raise ConfigError(f"table {means[0]} pooling_mode=mean sharded by rows beside multi-hot table {multi[0]} not "
                          "sharded by rows: TorchRec divides every such table's pooled output by its ids too (its mean "
                          "callback, embeddingbag.py _create_mean_pooling_divisor @1.8.0); place them otherwise")


def synthetic_batch(spec: DlrmSpec, placements: list[Placement], batch: int, seed: int) -> Any:
    """One rank's batch (module docstring) from its own seed."""
    from torchrec import KeyedJaggedTensor
    from torchrec.datasets.utils import Batch

    g = torch.Generator().manual_seed(seed)
    blocks = {p.table: len(p.ranks) for p in placements if p.sharding in ("row_wise", "table_row_wise")}
    values = []
    for t in spec.tables:
        count = batch * int(t.pooling)
        k = blocks.get(t.name, 1)
        size = math.ceil(t.rows / k)  # TorchRec's row-wise block (the last may be shorter)
        block = torch.arange(count) % k
        span = torch.clamp(t.rows - block * size, max=size)
        values.append(block * size + (torch.rand(count, generator=g) * span).long())
    lengths = torch.tensor([int(t.pooling) for t in spec.tables for _ in range(batch)], dtype=torch.int32)
    sparse = KeyedJaggedTensor.from_lengths_sync(keys=[f"{t.name}_ids" for t in spec.tables],
                                                 values=torch.cat(values), lengths=lengths)
    return Batch(dense_features=torch.randn(batch, spec.dense_features, generator=g), sparse_features=sparse,
                 labels=torch.randint(0, 2, (batch,), generator=g).float())


def global_batch(spec: DlrmSpec, placements: list[Placement], batch: int, ranks: int, step: int) -> Any:
    """The ranks' batches of ``step`` joined in rank order: what a single process trains on."""
    from torchrec import KeyedJaggedTensor
    from torchrec.datasets.utils import Batch

    parts = [synthetic_batch(spec, placements, batch, seed_of(step, r)) for r in range(ranks)]
    keys = [f"{t.name}_ids" for t in spec.tables]
    features = [[p.sparse_features[k] for p in parts] for k in keys]  # per key, its jagged tensor of every rank
    sparse = KeyedJaggedTensor.from_lengths_sync(
        keys=keys, values=torch.cat([j.values() for feature in features for j in feature]),
        lengths=torch.cat([j.lengths() for feature in features for j in feature]))
    return Batch(dense_features=torch.cat([p.dense_features for p in parts]), sparse_features=sparse,
                 labels=torch.cat([p.labels for p in parts]))


def seed_of(step: int, rank: int) -> int:
    return 1_000 * step + rank + 1


@contextlib.contextmanager
def counting(world: int, rank: int) -> Iterator[dict[str, int]]:
    """Bytes this rank sends to its peers by kind (module docstring), while the block runs; ``world`` and ``rank``:
    the size of the group the embedding collectives span and this rank's index in it."""
    counts = dict.fromkeys(KINDS, 0)
    originals = {name: getattr(dist, name) for name in ("all_to_all_single", "reduce_scatter_tensor",
                                                         "all_gather_into_tensor")}

    def kind(tensor: torch.Tensor, splits: object) -> str:
        if tensor.is_floating_point():
            return "pooled_backward" if torch._C._current_autograd_node() is not None else "pooled_forward"
        return "inputs" if splits is not None else "headers"

    def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, **kw):  # type: ignore[no-untyped-def]
        row = input.element_size() * (input.numel() // input.shape[0] if input.dim() and input.shape[0] else 1)
        own = input_split_sizes[rank] if input_split_sizes is not None else input.shape[0] // world
        counts[kind(input, input_split_sizes)] += input.numel() * input.element_size() - own * row
        return originals["all_to_all_single"](output, input, output_split_sizes, input_split_sizes, **kw)

    def reduce_scatter_tensor(output, input, *a, **kw):  # type: ignore[no-untyped-def]
        counts[kind(input, None)] += input.numel() * input.element_size() * (world - 1) // world
        return originals["reduce_scatter_tensor"](output, input, *a, **kw)

    def all_gather_into_tensor(output, input, *a, **kw):  # type: ignore[no-untyped-def]
        counts[kind(input, None)] += input.numel() * input.element_size() * (world - 1)
        return originals["all_gather_into_tensor"](output, input, *a, **kw)

    wrappers = {"all_to_all_single": all_to_all_single, "reduce_scatter_tensor": reduce_scatter_tensor,
                "all_gather_into_tensor": all_gather_into_tensor}
    for name, fn in wrappers.items():
        setattr(dist, name, fn)
    try:
        yield counts
    finally:
        for name, fn in originals.items():
            setattr(dist, name, fn)


def _sharded(spec: DlrmSpec, placements: list[Placement], full: Any, fused: dict[str, Any], group: int) -> Any:
    """The model sharded within groups of ``group`` ranks, holding ``full``'s weights: by TorchRec's
    ``DistributedModelParallel`` over all ranks, or by its ``DMPCollection`` (:mod:`plait.workloads.dlrm.two_d`)."""
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder

    world = dist.get_world_size()
    plan = sharding_plan(spec, placements, group, group, device_type="cpu", path=SPARSE_PATH)
    sharders = [EmbeddingBagCollectionSharder(fused_params=fused)]
    if group < world:
        model = collection(build(spec, "meta"), plan, group, sharders)
    else:
        model = DistributedModelParallel(build(spec, "meta"), device=torch.device("cpu"), plan=plan, sharders=sharders)
    weights = full.state_dict()
    with torch.no_grad():
        for key, value in model.state_dict().items():
            shards = _local_shards(value)
            if shards is None:
                value.copy_(weights[key])
            for shard, (rows, cols) in shards or []:  # each local shard's slice of the table
                shard.copy_(weights[key][rows:rows + shard.shape[0], cols:cols + shard.shape[1]])
    return model


def _local_shards(value: Any) -> list[tuple[torch.Tensor, tuple[int, int]]] | None:
    """A sharded table's local shards with their (row, column) offsets: a ``ShardedTensor`` (TorchRec's
    ``DistributedModelParallel``) or a ``DTensor`` over TorchRec's ``LocalShardsWrapper`` (its ``DMPCollection``);
    ``None`` for a plain tensor."""
    if hasattr(value, "local_shards"):
        return [(s.tensor, tuple(s.metadata.shard_offsets)) for s in value.local_shards()]  # type: ignore[misc]
    local = value.to_local() if hasattr(value, "to_local") else None
    if local is not None and hasattr(local, "local_shards"):
        shards = local.local_shards()  # a rank without shards has none, but one empty chunk's offsets
        return [(t, tuple(o)) for t, o in zip(shards, local.local_offsets()[:len(shards)], strict=True)]  # type: ignore[misc]
    return None


def _fused(optimizer: str) -> dict[str, Any]:
    from fbgemm_gpu.split_embedding_configs import EmbOptimType

    kinds = {"sgd": EmbOptimType.EXACT_SGD, "rowwise_adagrad": EmbOptimType.EXACT_ROWWISE_ADAGRAD}
    return {"optimizer": kinds[optimizer], "learning_rate": LEARNING_RATE}


def _dense_optimizer(optimizer: str, params: list[torch.Tensor]) -> torch.optim.Optimizer:
    if optimizer == "sgd":
        return torch.optim.SGD(params, lr=LEARNING_RATE)
    return torch.optim.Adagrad(params, lr=LEARNING_RATE)


def train(spec: DlrmSpec, placements: list[Placement], batch: int, steps: int, optimizer: str,
          reference_ranks: int = 0, group: int = 0) -> dict[str, Any]:
    """Train ``steps`` steps (module docstring); ``group``: ranks that share the tables (0: all; fewer: 2D sparse
    parallelism, the replicas synced after each step); ``reference_ranks``: instead, one process on the global
    batch of that many ranks, plain PyTorch (no sharding, no TorchRec optimizer)."""
    torch.manual_seed(0)
    full = build(spec, "cpu")
    losses, times, counted = [], [], []
    if reference_ranks:
        if optimizer != "sgd":
            raise ConfigError(f"--reference takes optimizer sgd (plain PyTorch), got {optimizer}")
        opt = torch.optim.SGD(full.parameters(), lr=LEARNING_RATE)
        for step in range(steps):
            began = time.perf_counter()
            loss, _ = full(global_batch(spec, placements, batch, reference_ranks, step))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            times.append(time.perf_counter() - began)
        return {"losses": losses, "step_times_s": times}
    from torchrec.optim.optimizers import in_backward_optimizer_filter

    rank, world = dist.get_rank(), dist.get_world_size()
    group = group or world
    model = _sharded(spec, placements, full, _fused(optimizer), group)
    dense = _dense_optimizer(optimizer, [p for _, p in in_backward_optimizer_filter(model.named_parameters())])
    for step in range(steps):
        data = synthetic_batch(spec, placements, batch, seed_of(step, rank))
        began = time.perf_counter()
        with counting(group, group_rank(rank, world, group)) as counts:
            loss, _ = model(data)
            dense.zero_grad()
            loss.backward()
            dense.step()
            if group < world:  # the replicas' tables averaged after every step (two_d module docstring)
                counted_sync(model, counts)
                model.sync()
        times.append(time.perf_counter() - began)
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
        counted.append({k: v for k, v in counts.items() if group < world or k != "replica_sync"})  # 2D only
    every = [None] * world
    dist.all_gather_object(every, counted[0])
    return {"losses": losses, "step_times_s": times, "bytes": every}


def main(argv: list[str] | None = None) -> int:
    args = read_config(DlrmConfig, argv, prog="plait.workloads.dlrm.worker", description=__doc__)
    spec = read_dlrm(args.model)

    def work() -> dict[str, Any]:
        placements = parse_placements(args.placements, spec, args.sparse_group or args.reference
                                      or dist.get_world_size())
        check_runnable(spec, placements, args.batch)
        return train(spec, placements, args.batch, args.steps, args.optimizer, args.reference, args.sparse_group)

    return run_job(args.out, bool(args.reference), work)


if __name__ == "__main__":
    sys.exit(main())
