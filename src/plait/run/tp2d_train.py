"""``plait run`` of a plan whose tensor parallelism is a 2-D or 2.5-D grid (:mod:`plait.run.tp2d_model`).

The training loop is the one-process model's (:func:`plait.run.worker.train_step` without data, pipeline or
context parallelism): every micro-batch's mean token cross-entropy, divided by the micro-batch count, backward;
the weight gradients completed over the grid (:func:`plait.run.tp2d_model.finish_layer_grads` per micro-batch,
the embedding's and head's once per step); clipping by the whole model's norm with each block counted once
(2.5-D's ``d`` copies of a block once); the plan's optimizer (AdamW or SGD, elementwise, so stepping a rank's
blocks is stepping the whole model's) and its warm-up/cosine schedule. Rank ``(z, i, j)`` trains on sequences
``z*q + i`` of each micro-batch split ``q*d`` ways. The grid is the whole job (``dp = pp = cp = 1``: the capability
table refuses the rest).
"""

from __future__ import annotations

import math
import os
import sys

import torch
import torch.distributed as dist
from torch.optim.lr_scheduler import LambdaLR

from plait.cost.tp2d import grid as grid_of
from plait.errors import ConfigError
from plait.run import data
from plait.run.optim import optimizer_recipe
from plait.run.tp2d import make_grid
from plait.run.tp2d_model import (
    GridModel,
    build_grid_model,
    finish_edge_grads,
    finish_layer_grads,
    grid_grad_norm,
    grid_logits,
)
from plait.run.train import (
    NonFiniteStep,
    StepMetrics,
    TrainConfig,
    autocast,
    cross_entropy,
    lr_lambda,
    micro_batches,
    peak_memory_bytes,
    timed,
    write_metrics,
)
from plait.run.worker_config import WorkerConfig, whole_loop_option


def check_grid_options(args: WorkerConfig) -> None:
    """Refuse the ``plait run`` options the grid loop does not implement."""
    option = whole_loop_option(args)
    if option:
        raise ConfigError(f"{option} with a tensor-parallel grid: plait's grid loop (plait/run/tp2d_train.py) "
                          "does not implement it")


def run_grid(args: WorkerConfig, plan, spec, device: str) -> int:  # type: ignore[no-untyped-def]
    """Train ``spec`` on the plan's grid for ``args.steps`` steps; rank 0 reports (metrics with ``grid_bytes``)."""
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    q, d = grid_of(plan)
    if dist.get_world_size() != q * q * d:
        raise ConfigError(f"{dist.get_world_size()} ranks for tp={plan.tp}: a grid runs alone on tp ranks")
    grid = make_grid(q, d)
    model = build_grid_model(spec, plan.seq_len, args.seed, grid, device)
    config = TrainConfig(steps=args.steps, lr=args.lr, seed=args.seed, on_nonfinite=args.on_nonfinite)
    optimizer_class, kwargs = optimizer_recipe(plan.optimizer, config)
    optimizer = optimizer_class(list(model.params.values()), **kwargs)
    scheduler = LambdaLR(optimizer, lr_lambda(config))
    if args.dry_run:
        if dist.get_rank() == 0:
            print(f"dry run ok: {plan.describe()} on {q * q * d} ranks, a {q}x{q}x{d} grid")
        return 0
    for step in range(args.steps):
        start = timed()
        inputs, targets = data.global_batch(step, plan.global_batch, plan.seq_len)
        grid.counted.clear()
        model.edges.counted.clear()
        loss = _forward_backward(model, inputs, targets, plan, args.full_precision, device)
        norm = float(grid_grad_norm(model))
        if not math.isfinite(norm) and config.on_nonfinite == "stop":
            raise NonFiniteStep(f"step {step + 1}: the gradient norm is {norm}; the run stops")
        if math.isfinite(norm):
            torch.nn.utils.clip_grads_with_norm_(list(model.params.values()), config.max_grad_norm,
                                                 torch.tensor(norm, device=device))
            optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        elapsed = timed() - start
        loss = _mean_over_rows(loss, q)
        if dist.get_rank() == 0:
            counted = {f"layers/{g}/{k}": v for (g, k), v in grid.counted.items()}
            counted.update({f"edges/{g}/{k}": v for (g, k), v in model.edges.counted.items()})
            tokens = plan.global_batch * plan.seq_len
            write_metrics(args.metrics, StepMetrics(step + 1, loss, norm, elapsed, tokens / elapsed,
                                                    peak_memory_bytes(), started_s=start, grid_bytes=counted))
            print(f"step {step + 1}: loss {loss:.6f} grad-norm {norm:.4f} {elapsed:.3f} s", file=sys.stderr)
    return 0


def _forward_backward(model: GridModel, inputs: torch.Tensor, targets: torch.Tensor, plan, full_precision: bool,  # type: ignore[no-untyped-def]
                      device: str) -> float:
    """Every micro-batch's forward and backward on this rank's sequences; the gradients summed over the
    micro-batches and completed over the grid. Returns this row's loss (a share of the step's mean)."""
    grid = model.grid
    rows, row = grid.q * grid.d, grid.z * grid.q + grid.i
    chunks = micro_batches(inputs, targets, plan.micro_batch)
    summed: dict[str, torch.Tensor] = {}
    total = 0.0
    for x, y in chunks:
        per = x.shape[0] // rows
        mine = slice(row * per, (row + 1) * per)
        with autocast(plan, full_precision, device):
            loss = cross_entropy(grid_logits(model, x[mine].to(device)), y[mine].to(device)) / (rows * len(chunks))
        loss.backward()
        finish_layer_grads(model)
        for name, p in model.params.items():
            assert p.grad is not None
            summed[name] = p.grad if name not in summed else summed[name] + p.grad
            p.grad = None
        total += float(loss.detach())
    for name, p in model.params.items():
        p.grad = summed[name]
    finish_edge_grads(model)
    return total


def _mean_over_rows(loss: float, q: int) -> float:
    """The step's mean loss: every rank holds its row's share, the same on the row's ``q`` ranks."""
    tensor = torch.tensor([loss], dtype=torch.float64)
    dist.all_reduce(tensor)
    return float(tensor.item()) / q
