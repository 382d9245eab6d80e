"""plait's training step next to a plain hand-written PyTorch DDP step, in one run (baseline of
benchmarks/run_vs_predict.py).

torchrun --nproc-per-node 2 benchmarks/plain_ddp.py MODEL_TOML GLOBAL_BATCH MICRO_BATCH STEPS OUT_JSON

Each rank builds two identical models: one through plait's runtime (DeviceMesh, ``parallelize``,
``build_optimizer``, ``train_step`` — what ``plait run`` executes each step), one as a
hand-written loop (DDP on the default group, AdamW, ``clip_grad_norm_``) with the same data and
optimizer settings and none of plait's machinery. Steps alternate between the two, the order
flipping every step, so that machine noise (±20% run to run on this 2-core machine) hits both
alike; rank 0 writes ``{"plait": [...], "plain": [...], "plait_cpu": [...], "plain_cpu": [...]}``: wall seconds per
step, and the CPU seconds of rank 0's process in each (``time.process_time``, its threads together: gloo's too).
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from plait.plan.plan import Plan
from plait.run import data
from plait.run.mesh import build_mesh
from plait.run.model import build_model
from plait.run.optim import build_optimizer
from plait.run.rank_setup import build_parts
from plait.run.train import TrainConfig
from plait.run.worker import train_step
from plait.workload.catalog import resolve_model


def main() -> None:
    model_file, batch, micro, steps, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    spec = resolve_model(model_file)
    config = TrainConfig(steps=steps)

    plan = Plan(dp_replicate=world, global_batch=batch, micro_batch=micro).with_seq_len(spec.seq_len)
    mesh = build_mesh(plan)
    parts, _ = build_parts(mesh, spec, plan, spec.seq_len, config.seed, False)
    params = [p for part in parts for p in part.parameters()]
    optimizer, scheduler = build_optimizer(params, mesh, config)

    def plait_step(x: torch.Tensor, y: torch.Tensor) -> None:
        train_step(parts, None, mesh, plan, params, optimizer, scheduler, config, x, y, False, "cpu", 0)

    model = torch.nn.parallel.DistributedDataParallel(build_model(spec, spec.seq_len, config.seed))
    plain_optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=(0.9, 0.95),
                                        weight_decay=config.weight_decay)

    def plain_step(x: torch.Tensor, y: torch.Tensor) -> None:
        chunks = list(zip(x.split(micro), y.split(micro)))
        for i, (xb, yb) in enumerate(chunks):
            ctx = model.no_sync() if i < len(chunks) - 1 else torch.enable_grad()
            with ctx, torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(xb).float().flatten(0, 1), yb.flatten()) / len(chunks)
                loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        plain_optimizer.step()
        plain_optimizer.zero_grad(set_to_none=True)

    loops = {"plait": plait_step, "plain": plain_step}
    times: dict[str, list[float]] = {key: [] for name in loops for key in (name, f"{name}_cpu")}
    for step in range(steps):
        x, y = data.global_batch(step, batch, spec.seq_len)
        x, y = data.rank_slice(x, rank, world), data.rank_slice(y, rank, world)
        for name in (("plait", "plain") if step % 2 == 0 else ("plain", "plait")):
            dist.barrier()
            start, cpu = time.perf_counter(), time.process_time()
            loops[name](x, y)
            times[name].append(time.perf_counter() - start)
            times[f"{name}_cpu"].append(time.process_time() - cpu)
    if rank == 0:
        with open(out, "w") as handle:
            json.dump(times, handle)
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
