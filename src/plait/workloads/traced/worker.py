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
- ``dp_sync`` methods other than the all-reduce (unsharded, unpipelined replicas, as the traced planner ranks them):
  :func:`plait.run.sync.wrap_model` and :func:`plait.run.sync.wrap_optimizer` (DDP with the method's hook, or the
  optimizer that averages), as the transformer runtime runs them;
- recomputation: ``checkpoint_wrapper`` around the first ``recompute_units`` units (all with -1; a pipeline stage's
  first of its own);
- ``pp > 1``: the module cut before the units ``stage_starts`` names (the cut the cost model's partition chose,
  :func:`plait.workloads.traced.timing.split_stages`) by ``torch.distributed.pipelining``'s tracer (``pipeline`` with
  ``SplitPoint.BEGINNING``), each stage on its own ranks under PyTorch's GPipe or 1F1B schedule (gradients averaged
  over the micro-batches: ``scale_grads``), its data parallelism as above over the stage's data-parallel ranks;
- ``tp > 1``: the units' Linear pairs and self-attentions split over adjacent ranks, alone or under DDP over ``dp``
  such groups (``tp x dp``, unsharded replicas with the all-reduce), every rank of a TP group running its replica's rows
  (:mod:`plait.workloads.traced.tp_runtime`), with the bytes each step hands to the TP and DDP collectives; with
  ``pp > 1`` each stage's pairs split over its TP group (unsharded replicas averaging their gradients after the
  schedule, as above).

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
from plait.workloads.traced import tp_runtime
from plait.workloads.traced.recorder import first_tensor
from plait.workloads.traced.tracing import choose_units, load_factory

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


def parallelize(model: nn.Module, config: TracedConfig, units: list[str], mesh: Any) -> tuple[nn.Module, Any]:
    """``model`` (the whole model, or a pipeline stage's part) under the plan's data parallelism over ``mesh``'s
    ``replicate`` and ``shard`` axes (module docstring), and its optimizer; ``units``: the repeated units it holds."""
    dp = config.dp_replicate * config.dp_shard
    if dp > 1 and config.sharding in ("zero2", "zero3"):
        from torch.distributed.fsdp import fully_shard

        dp_mesh = mesh["replicate", "shard"] if config.dp_replicate > 1 else mesh["shard"]
        keep = config.sharding == "zero2"
        for path in units:
            fully_shard(model.get_submodule(path), mesh=dp_mesh, reshard_after_forward=not keep)
        fully_shard(model, mesh=dp_mesh, reshard_after_forward=not keep)
        return model, make_optimizer(model.parameters(), config)
    if dp > 1 and config.dp_sync != "allreduce" and config.pp == 1:  # whole replicas: the method's own pieces
        return _synchronized(model, config)
    if dp > 1:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, process_group=_replicas(mesh).get_group())
    return model, _replica_optimizer(model, config, mesh)


def _synchronized(model: nn.Module, config: TracedConfig) -> tuple[nn.Module, Any]:
    """``model`` and its optimizer under ``config.dp_sync`` over every rank (unsharded replicas of the whole
    model: :func:`plait.run.sync.wrap_model` and :func:`plait.run.sync.wrap_optimizer`, as the transformer runtime
    runs them)."""
    from plait.run.sync import wrap_model, wrap_optimizer
    from plait.sync import parse

    sync = parse(config.dp_sync)
    whole = [(name, tuple(p.shape)) for name, p in model.named_parameters()]
    accumulations = config.global_batch // dist.get_world_size() // config.micro_batch
    module = wrap_model(model, sync)  # Crossbow: the rank's learners, whose parameters all step
    optimizer = wrap_optimizer(make_optimizer(module.parameters(), config), sync,
                               modules=(module if sync.whole_learners else model,), whole=whole,
                               accumulations=accumulations)
    return module, optimizer


def pipeline_stage(model: nn.Module, config: TracedConfig, units: list[str], mesh: Any, example: torch.Tensor) -> Any:
    """This rank's stage of the module cut before the units ``config.stage_starts`` names (module docstring)."""
    from torch.distributed.pipelining import SplitPoint, pipeline

    pipe = pipeline(model, mb_args=(example,),
                    split_spec={units[i - 1]: SplitPoint.BEGINNING for i in config.stage_starts})
    return pipe, mesh["pp"].get_local_rank()


def _optimizer_class(config: TracedConfig) -> tuple[type[torch.optim.Optimizer], dict[str, float]]:
    """AdamW, or SGD with momentum 0.9, and its arguments at the run's learning rate."""
    if config.optimizer == "sgd":
        return torch.optim.SGD, {"lr": config.lr, "momentum": 0.9}
    return torch.optim.AdamW, {"lr": config.lr}


def make_optimizer(params: Any, config: TracedConfig) -> torch.optim.Optimizer:
    """The run's optimizer over ``params`` (:func:`_optimizer_class`)."""
    optimizer_class, arguments = _optimizer_class(config)
    return optimizer_class(params, **arguments)


def _replicas(mesh: Any) -> Any:
    """The data-parallel ranks of this rank's stage: the mesh's replicate and shard axes as one."""
    return mesh["replicate", "shard"]._flatten()


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
    distributed = dist.is_initialized() and not config.reference
    pipelined = distributed and config.pp > 1
    if config.recompute_units and not pipelined:  # a pipeline's stages wrap theirs once cut (_pipeline)
        recompute(model, units, config.recompute_units)
    dp = config.dp_replicate * config.dp_shard if distributed else 1
    tensor_parallel = distributed and config.tp > 1 and not pipelined  # tp x pp: the stages split their pairs
    mesh = _mesh(config) if distributed and not tensor_parallel else None
    dp_rank = _replicas(mesh).get_local_rank() if mesh is not None else 0
    rows = config.global_batch // dp
    counts, counted, whole = tp_runtime.Counts(), [], {name: p.numel() for name, p in model.named_parameters()}
    if tensor_parallel:
        if dp > 1 and (config.sharding != "none" or config.dp_sync != "allreduce"):
            raise ValueError(f"tp={config.tp} runs beside unsharded replicas only (sharding = none, allreduce)")
        tp_mesh = tp_runtime.mesh_of(config.tp, dp)
        dp_rank = tp_mesh["dp"].get_local_rank()
        model = tp_runtime.split_pairs(model, units, tp_mesh["tp"])
        model = tp_runtime.replicate(model, tp_mesh["dp"], counts) if dp > 1 else model
        named = tp_runtime.parameters_of(model)
        optimizer = make_optimizer(model.parameters(), config)
    elif pipelined:
        schedule, stage_module, optimizer, last = _pipeline(model, config, units, mesh, bound)
    else:
        model, optimizer = parallelize(model, config, units, mesh) if distributed else (
            model, make_optimizer(model.parameters(), config))
    losses, times = [], []
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if config.bf16 else contextlib.nullcontext()
    for step in range(config.steps):
        batch = global_batch(config, step, bound)[dp_rank * rows:(dp_rank + 1) * rows]
        if distributed:
            dist.barrier()
        start = time.perf_counter()
        if _skips_gradient(config, optimizer):  # PALSGD's pseudo-synchronization step: no pass
            optimizer.step()
            times.append(time.perf_counter() - start)
            losses.append(float("nan"))
            continue
        if pipelined:
            total = _pipeline_step(schedule, mesh, batch, last, autocast)
            if dp > 1 and config.sharding not in ("zero2", "zero3"):
                average_gradients(stage_module, mesh)
        else:
            with tp_runtime.counting(counts) if tensor_parallel else contextlib.nullcontext():
                total = _step(model, batch.split(config.micro_batch), autocast)
            counted.append(counts.take())
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if tensor_parallel and dp > 1:  # a TP group's ranks hold the same loss: sum the replicas'
            dist.all_reduce(total, group=tp_mesh["dp"].get_group())
        elif distributed and not tensor_parallel:
            dist.all_reduce(total)  # each replica's (last stage's) mean, summed: / dp below
        times.append(time.perf_counter() - start)
        losses.append(float(total) / (dp * (config.tp if pipelined else 1)))  # every last-stage TP rank's, summed
    held = stage_module if pipelined else model
    checksum = torch.tensor(tp_runtime.parameter_sum(named, whole, tp_mesh["tp"]) if tensor_parallel else
                            math.fsum(float(p.detach().float().sum()) for p in _full_parameters(held)),
                            dtype=torch.float64)
    if pipelined:  # every stage's share, once per replica
        dist.all_reduce(checksum, group=mesh["pp"].get_group())
    world = dist.get_world_size() if distributed else 1
    return {"losses": losses, "step_times_s": times, "peak_memory_bytes": resident_bytes(),
            "parameter_sum": float(checksum), "ranks": world,
            "tp_bytes_per_step": [t for t, _ in counted], "dp_bytes_per_step": [d for _, d in counted]}


def _skips_gradient(config: TracedConfig, optimizer: Any) -> bool:
    if config.dp_sync == "allreduce" or config.reference:
        return False
    from plait.run.outer_loop import skips_gradient

    return skips_gradient(optimizer)


def _mesh(config: TracedConfig) -> Any:
    """The ranks as (pp, replicate, shard, tp): a TP group's ranks adjacent, a stage's replicas ``tp`` apart."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (config.pp, config.dp_replicate, config.dp_shard, config.tp),
                            mesh_dim_names=("pp", "replicate", "shard", "tp"))


def _step(model: nn.Module, pieces: tuple[torch.Tensor, ...], autocast: Any) -> torch.Tensor:
    """One step's micro-batches forward and backward; the mean loss."""
    total = torch.zeros(())
    for i, piece in enumerate(pieces):
        with no_sync(model, i == len(pieces) - 1), autocast:
            loss = first_tensor(model(piece)).float().mean() / len(pieces)
        loss.backward()
        total += loss.detach()
    return total


def _pipeline(model: nn.Module, config: TracedConfig, units: list[str], mesh: Any, bound: int) -> tuple[Any, ...]:
    """The schedule of this rank's stage (data-parallel over its stage's ranks), its module, optimizer, and whether
    it is the last stage."""
    from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe

    example = global_batch(config, 0, bound)[:config.micro_batch]
    pipe, index = pipeline_stage(model, config, units, mesh, example)
    stage_module = pipe.get_stage_module(index)
    held = [u for u in units if _has(stage_module, u)]
    if config.tp > 1:
        if config.sharding != "none":
            raise ValueError(f"tp={config.tp} with pp={config.pp} runs unsharded replicas only (sharding = none)")
        stage_module = tp_runtime.split_stage_pairs(stage_module, model, held, mesh["tp"])
    if config.recompute_units:  # the tracer's stage calls each unit as a module: wrap it there
        recompute(stage_module, held, config.recompute_units)
    if config.sharding in ("zero2", "zero3"):
        stage_module, optimizer = parallelize(stage_module, config, held, mesh)
    else:  # DDP's reducer under a schedule's interleaved passes fails (PyTorch 2.13): gradients averaged after
        optimizer = _replica_optimizer(stage_module, config, mesh)
    from torch.distributed.pipelining import PipelineStage

    stage = PipelineStage(stage_module, index, config.pp, torch.device("cpu"), group=mesh["pp"].get_group())
    micro = config.global_batch // (config.dp_replicate * config.dp_shard) // config.micro_batch
    kind = ScheduleGPipe if config.schedule == "gpipe" else Schedule1F1B
    schedule = kind(stage, n_microbatches=micro, loss_fn=lambda out, _: first_tensor(out).float().mean())
    return schedule, stage_module, optimizer, index == config.pp - 1


def _replica_optimizer(module: nn.Module, config: TracedConfig, mesh: Any) -> Any:
    """The optimizer of a model (or a pipeline stage's part) whose data-parallel ranks hold whole copies: ZeRO-1's
    over the ``dp_shard`` ranks, or a plain one."""
    if config.sharding != "zero1" or config.dp_shard <= 1:
        return make_optimizer(module.parameters(), config)
    from torch.distributed.optim import ZeroRedundancyOptimizer

    optimizer_class, arguments = _optimizer_class(config)
    return ZeroRedundancyOptimizer(module.parameters(), optimizer_class=optimizer_class,
                                   process_group=mesh["shard"].get_group(), **arguments)


def average_gradients(module: nn.Module, mesh: Any) -> None:
    """Each gradient averaged over the stage's data-parallel ranks (what DDP's buckets do, after the backward)."""
    group = _replicas(mesh).get_group()
    for param in module.parameters():
        if param.grad is not None:  # a split pair's DTensor gradient: its local shard, in place
            grad = param.grad.to_local() if hasattr(param.grad, "to_local") else param.grad
            dist.all_reduce(grad, op=dist.ReduceOp.AVG, group=group)


def _has(module: nn.Module, path: str) -> bool:
    try:
        module.get_submodule(path)
    except AttributeError:
        return False
    return True


def _pipeline_step(schedule: Any, mesh: Any, batch: torch.Tensor, last: bool, autocast: Any) -> torch.Tensor:
    """One step through the pipeline; the last stage's mean loss (0 elsewhere)."""
    first = mesh["pp"].get_local_rank() == 0
    losses: list[torch.Tensor] = []
    with autocast:
        if first:
            schedule.step(batch)
        elif last:
            schedule.step(target=torch.zeros(len(batch)), losses=losses)
        else:
            schedule.step()
    return torch.stack([loss.detach() for loss in losses]).mean() if last else torch.zeros(())


def _full_parameters(model: nn.Module) -> list[torch.Tensor]:
    """Every parameter whole (FSDP2's shards and tensor-parallel splits gathered)."""
    return [p.full_tensor() if hasattr(p, "full_tensor") else p for p in model.parameters()]


def main(argv: list[str] | None = None) -> int:
    config = read_config(TracedConfig, argv, prog="python -m plait.workloads.traced.worker")
    return run_job(config.out, config.reference, lambda: train(config))


if __name__ == "__main__":
    raise SystemExit(main())
