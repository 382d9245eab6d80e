"""A plain hand-written PyTorch DDP loop (the baseline of benchmarks/run_vs_predict.py).

torchrun --nproc-per-node 2 benchmarks/plain_ddp.py MODEL_TOML GLOBAL_BATCH MICRO_BATCH STEPS OUT_JSON
Same model class, data and optimizer settings as ``plait run``, none of its machinery.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from plait.run import data
from plait.run.model import build_model
from plait.workload.catalog import resolve_model


def main() -> None:
    model_file, batch, micro, steps, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    spec = resolve_model(model_file)
    model = torch.nn.parallel.DistributedDataParallel(build_model(spec, spec.seq_len, 1234))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    times = []
    for step in range(steps):
        start = time.perf_counter()
        x, y = data.global_batch(step, batch, spec.seq_len)
        x, y = data.rank_slice(x, rank, world), data.rank_slice(y, rank, world)
        chunks = list(zip(x.split(micro), y.split(micro)))
        for i, (xb, yb) in enumerate(chunks):
            ctx = model.no_sync() if i < len(chunks) - 1 else torch.enable_grad()
            with ctx, torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(xb).float().flatten(0, 1), yb.flatten()) / len(chunks)
                loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    if rank == 0:
        with open(out, "w") as handle:
            json.dump(times, handle)
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
