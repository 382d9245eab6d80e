"""A traced module's data-parallel plan trained on torch.distributed: one rank, or the single-process reference.

The model is the factory's module (``module:attr``, :func:`plait.workloads.traced.tracing.load_factory`), built with
the run's seed on every rank; its repeated units are the ones the trace cut it into
(:func:`plait.workloads.traced.tracing.choose_units`). The plan's data parallelism is PyTorch's own:

- ``sharding = "none"``: ``DistributedDataParallel`` over every rank (its gradient buckets all-reduced as the
  backward produces them; Li et al., VLDB 2020, Sec. 3.2);
- ``zero1``: the same, with ``ZeroRedundancyOptimizer`` sharding the optimizer's state over the ``dp_shard`` ranks
  (Rajbhandari et al., SC 2020, Sec. 5.1);
- ``zero2`` / ``zero3``: FSDP2's ``fully_shard`` on each unit and the root over the ``dp_shard`` ranks (with
  ``dp_replicate > 1``, HSDP's two-dimensional mesh), ``reshard_after_forward`` off for ZeRO-2 (the weights stay
  gathered from the forward to the backward; Zhao et al., VLDB 2023, Sec. 3.3);
- recomputation: ``checkpoint_wrapper`` around the first ``recompute_units`` units (all with -1).

Each step draws the job's global batch from a generator seeded by the run's seed and the step (normal values for
floating inputs; for integer inputs, ids below the smallest embedding table's size), each rank takes its rows and
runs them in micro-batches; the loss is the mean of the model's first output, as the trace takes it
(:mod:`plait.workloads.traced.tracing`), so averaging the ranks' gradients gives the gradient of the global batch's
loss, which the reference run computes in one process.

Run: ``python -m torch.distributed.run --nproc-per-node 2 -m plait.workloads.traced.worker --factory
plait.workload.zoo:small_cnn --input-shape 3,32,32 --global-batch 8 --micro-batch 2 --dp-replicate 2 --out r.json``.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from plait.run.config import read_config
from plait.run.gloo_job import run_job
from plait.run.train import resident_bytes
from plait.run.workload_configs import TracedConfig
from plait.workloads.traced.tracing import choose_units, first_tensor, load_factory

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "int64": torch.int64}


def build(config: TracedConfig) -> nn.Module:
    """The factory's module with the run's seed (the same weights on every rank)."""
    torch.manual_seed(config.seed)
    return load_factory(config.factory)()


def id_bound(model: nn.Module) -> int:
    """Integer inputs stay below the smallest embedding table's size (2 where the model has none)."""
    sizes = [m.num_embeddings for m in model.modules() if isinstance(m, nn.Embedding)]
    return min(sizes) if sizes else 2


def global_batch(config: TracedConfig, step: int, bound: int) -> torch.Tensor:
    """The step's global batch (module docstring): the same on every rank."""
    gen = torch.Generator().manual_seed(config.seed * 1_000_003 + step)
    shape = (config.global_batch, *config.input_shape)
    if config.input_dtype == "int64":
        return torch.randint(0, bound, shape, generator=gen)
    return torch.randn(shape, generator=gen).to(DTYPES[config.input_dtype])


def recompute(model: nn.Module, units: list[str], count: int) -> None:
    """Wrap the first ``count`` units (all for -1) in activation checkpointing."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    for path in units if count < 0 else units[:count]:
        parent_path, _, name = path.rpartition(".")
        parent = model.get_submodule(parent_path) if parent_path else model
        parent.register_module(name, checkpoint_wrapper(parent.get_submodule(name)))


def parallelize(model: nn.Module, config: TracedConfig, units: list[str]) -> tuple[nn.Module, Any]:
    """``model`` under the plan's data parallelism (module docstring) and its optimizer."""
    from torch.distributed.device_mesh import init_device_mesh

    world = dist.get_world_size() if dist.is_initialized() else 1
    if world > 1 and config.sharding in ("zero2", "zero3"):
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (config.dp_replicate, config.dp_shard), mesh_dim_names=("replicate", "shard"))
        mesh = mesh if config.dp_replicate > 1 else mesh["shard"]
        keep = config.sharding == "zero2"
        for path in units:
            fully_shard(model.get_submodule(path), mesh=mesh, reshard_after_forward=not keep)
        fully_shard(model, mesh=mesh, reshard_after_forward=not keep)
        return model, make_optimizer(model.parameters(), config)
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model)
    if world > 1 and config.sharding == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        mesh = init_device_mesh("cpu", (config.dp_replicate, config.dp_shard), mesh_dim_names=("replicate", "shard"))
        optimizer_class = torch.optim.AdamW if config.optimizer == "adamw" else torch.optim.SGD
        extra = {"momentum": 0.9} if config.optimizer == "sgd" else {}
        return model, ZeroRedundancyOptimizer(model.parameters(), optimizer_class=optimizer_class,
                                              process_group=mesh["shard"].get_group(), lr=config.lr, **extra)
    return model, make_optimizer(model.parameters(), config)


def make_optimizer(params: Any, config: TracedConfig) -> torch.optim.Optimizer:
    """AdamW, or SGD with momentum 0.9, at the run's learning rate."""
    if config.optimizer == "sgd":
        return torch.optim.SGD(params, lr=config.lr, momentum=0.9)
    return torch.optim.AdamW(params, lr=config.lr)


def no_sync(model: nn.Module, last: bool) -> contextlib.AbstractContextManager[None]:
    """Gradients reduced only after the step's last micro-batch (DDP's ``no_sync``; FSDP2's
    ``set_requires_gradient_sync``)."""
    if hasattr(model, "set_requires_gradient_sync"):
        model.set_requires_gradient_sync(last)  # type: ignore[operator]
        return contextlib.nullcontext()
    if hasattr(model, "no_sync") and not last:
        return model.no_sync()  # type: ignore[no-any-return]
    return contextlib.nullcontext()


def train(config: TracedConfig) -> dict[str, Any]:
    """Train ``config.steps`` steps; rank 0's (or the reference's) losses, step times and peak memory."""
    model = build(config)
    units, _ = choose_units(model)
    bound = id_bound(model)
    if config.recompute_units:
        recompute(model, units, config.recompute_units)
    distributed = dist.is_initialized() and not config.reference
    world, rank = (dist.get_world_size(), dist.get_rank()) if distributed else (1, 0)
    model, optimizer = parallelize(model, config, units) if distributed else (model, make_optimizer(
        model.parameters(), config))
    rows = config.global_batch // world
    losses, times = [], []
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if config.bf16 else contextlib.nullcontext()
    for step in range(config.steps):
        batch = global_batch(config, step, bound)[rank * rows:(rank + 1) * rows]
        pieces = batch.split(config.micro_batch)
        if distributed:
            dist.barrier()
        start = time.perf_counter()
        total = torch.zeros(())
        for i, piece in enumerate(pieces):
            with no_sync(model, i == len(pieces) - 1), autocast:
                loss = first_tensor(model(piece)).float().mean() / len(pieces)
            loss.backward()
            total += loss.detach()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if distributed:
            dist.all_reduce(total, op=dist.ReduceOp.AVG)
        times.append(time.perf_counter() - start)
        losses.append(float(total))
    checksum = math.fsum(float(p.detach().float().sum()) for p in _full_parameters(model))
    return {"losses": losses, "step_times_s": times, "peak_memory_bytes": resident_bytes(),
            "parameter_sum": checksum, "ranks": world}


def _full_parameters(model: nn.Module) -> list[torch.Tensor]:
    """Every parameter whole (FSDP2's shards gathered)."""
    return [p.full_tensor() if hasattr(p, "full_tensor") else p for p in model.parameters()]


def main(argv: list[str] | None = None) -> int:
    config = read_config(TracedConfig, argv, prog="python -m plait.workloads.traced.worker")
    return run_job(config.out, config.reference, lambda: train(config))


if __name__ == "__main__":
    raise SystemExit(main())
