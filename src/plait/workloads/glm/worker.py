"""The GLM worker on torch.distributed (gloo): data-parallel, feature-partitioned and switch-aggregated SGD (the
switch emulated on rank 0) and coordinate descent split by feature and by example on this rank's part of a
generated data set (:mod:`.sgd`, :mod:`.scd`, :mod:`.scd_dual`), every all-reduce counted
(:class:`plait.run.counted.Counted`: the ranks' bytes to their peers, a reduce-scatter and an all-gather as the ring
all-reduce sends them).

Rank 0 writes: per method the batch losses of each step (summed over ranks), the final weights (gathered after the
run, not counted), the bytes each rank sent per step and each rank's wall and CPU seconds (``time.perf_counter``,
``time.thread_time``) of each step's training (the batch's rows taken, the step with its all-reduce; not the
all-reduce of the loss for the log); for coordinate descent the objective after each epoch
under each aggregation rule, split by feature and by example (the dual's objective too).

Run: ``python -m torch.distributed.run --nproc-per-node 2 -m plait.workloads.glm.worker --out run.json``.

Tensor legend: ``N`` examples, ``D`` features, ``B`` batch rows, ``C`` this rank's columns.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from plait.run.config import read_config
from plait.run.counted import Counted
from plait.run.gloo_job import run_job
from plait.workloads.glm.config import GlmRunConfig
from plait.workloads.glm.cost import METHODS
from plait.workloads.glm.scd import RULES, Rule, objective, order_of, scd_epoch
from plait.workloads.glm.scd_dual import dual_objective, sdca_epoch
from plait.workloads.glm.sgd import batch_rows, data_parallel_step, feature_step, make_data


def _gather(w_C: torch.Tensor) -> list[float]:
    parts = [torch.empty_like(w_C) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, w_C)
    return torch.cat(parts).tolist()


def _sum(value: float) -> float:
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t)


def switch_sum(counted: Counted) -> Callable[[torch.Tensor], torch.Tensor]:
    """The sum over the ranks as an aggregating switch gives it, the switch emulated on rank 0: every other rank
    sends its tensor once and receives the sum once (:mod:`plait.workloads.glm.cost`; as
    :func:`plait.cost.servers.switch_sent_bytes` counts an emulated switch). Summed in rank order."""

    def reduce(x: torch.Tensor) -> torch.Tensor:
        rank, world = dist.get_rank(), dist.get_world_size()
        if rank != 0:
            counted.isend(x.contiguous(), 0).wait()
            total = torch.empty_like(x)
            dist.recv(total, 0)
            return total
        parts = [x] + [torch.empty_like(x) for _ in range(world - 1)]
        for peer in range(1, world):
            dist.recv(parts[peer], peer)
        total = torch.stack(parts).sum(dim=0)
        for work in [counted.isend(total, peer) for peer in range(1, world)]:
            work.wait()
        return total

    return reduce


def _sgd(cfg: GlmRunConfig, method: str) -> dict[str, Any]:
    rank, world = dist.get_rank(), dist.get_world_size()
    x_ND, y_N = make_data(cfg)
    cols = slice(rank * cfg.features // world, (rank + 1) * cfg.features // world)
    w = torch.zeros(cfg.features if method == "data_parallel" else cols.stop - cols.start)
    counted, losses, sent, times = Counted(), [], [], []
    reduce = switch_sum(counted) if method == "switch_aggregated" else counted.all_reduce
    for step in range(cfg.steps):
        rows, before = batch_rows(cfg, step), counted.sent
        start, cpu = time.perf_counter(), time.thread_time()
        if method == "data_parallel":
            local = data_parallel_step(x_ND[rows], y_N[rows], w, cfg, rank, world, reduce)
            times.append((time.perf_counter() - start, time.thread_time() - cpu))
            losses.append(_sum(local) / cfg.batch)
        else:
            losses.append(feature_step(x_ND[rows, cols], y_N[rows], w, cfg, reduce) / cfg.batch)
            times.append((time.perf_counter() - start, time.thread_time() - cpu))
        sent.append(counted.sent - before)
    by_rank: list[Any] = [None] * world
    dist.all_gather_object(by_rank, (sent, times))
    return {"losses": losses, "w": w.tolist() if method == "data_parallel" else _gather(w),
            "sent_per_step": [s for s, _ in by_rank], "step_s": [[t[0] for t in ts] for _, ts in by_rank],
            "step_cpu_s": [[t[1] for t in ts] for _, ts in by_rank]}


def _by_feature(cfg: GlmRunConfig, rule: Rule, x_ND: torch.Tensor, y_N: torch.Tensor) -> dict[str, Any]:
    rank, world = dist.get_rank(), dist.get_world_size()
    width = cfg.features // world
    cols = slice(rank * width, (rank + 1) * width)
    w_C, r_N, counted, curve = torch.zeros(width), -y_N.clone(), Counted(), []
    for epoch in range(cfg.scd_epochs):
        scd_epoch(x_ND[:, cols], y_N, w_C, r_N, cfg.l2, cfg.scd_block, rule, world,
                  order_of(width, cfg.seed, rank, epoch), counted.all_reduce)
        curve.append(objective(x_ND, y_N, torch.tensor(_gather(w_C)), cfg.l2))
    return {"objective": curve, "sent_per_epoch": counted.sent // cfg.scd_epochs}


def _by_example(cfg: GlmRunConfig, rule: Rule, x_ND: torch.Tensor, y_N: torch.Tensor) -> dict[str, Any]:
    rank, world = dist.get_rank(), dist.get_world_size()
    rows = cfg.samples // world
    mine = slice(rank * rows, (rank + 1) * rows)
    alpha_n, w_D, counted, curve, dual = torch.zeros(rows), torch.zeros(cfg.features), Counted(), [], []
    for epoch in range(cfg.scd_epochs):
        sdca_epoch(x_ND[mine], y_N[mine], alpha_n, w_D, cfg.l2, cfg.samples, cfg.scd_block, rule, world,
                   order_of(rows, cfg.seed, rank, epoch), counted.all_reduce)
        curve.append(objective(x_ND, y_N, w_D, cfg.l2))
        dual.append(dual_objective(x_ND, y_N, torch.tensor(_gather(alpha_n)), cfg.l2))
    return {"objective": curve, "dual": dual, "sent_per_epoch": counted.sent // cfg.scd_epochs}


def _scd(cfg: GlmRunConfig) -> dict[str, Any]:
    """Coordinate descent split by feature (:mod:`.scd`) and by example (:mod:`.scd_dual`) under each rule."""
    x_ND, y_N = make_data(cfg)
    return {split: {rule: run(cfg, rule, x_ND, y_N) for rule in RULES}
            for split, run in (("by_feature", _by_feature), ("by_example", _by_example))}


def train(cfg: GlmRunConfig) -> dict[str, Any]:
    """Every method on this rank (module docstring)."""
    torch.manual_seed(cfg.seed)
    result = {method: _sgd(cfg, method) for method in METHODS}
    result["scd"] = _scd(cfg) if cfg.loss == "squared" and cfg.scd_epochs else {}
    return result


def main(argv: list[str] | None = None) -> int:
    args = read_config(GlmRunConfig, argv, prog="plait.workloads.glm.worker", description=__doc__)
    return run_job(args.out, False, lambda: train(args))


if __name__ == "__main__":
    raise SystemExit(main())
