"""One rank of the synchronization-method checks (tests/test_sync.py), launched by torchrun: trains the tiny model
under each method given and writes, from rank 0, every step's mean loss and the bytes it handed to collectives."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from plait.plan.sync import parse_sync
from plait.run.data import global_batch, rank_slice
from plait.run.model import build_model
from plait.run.sync import attach, counted_bytes
from plait.run.train import cross_entropy
from plait.workload.catalog import resolve_model


def train(spec_text: str, optimizer_name: str, model_path: str, steps: int) -> dict[str, list[float]]:
    spec, sync = resolve_model(model_path), parse_sync(spec_text)
    rank, world = dist.get_rank(), dist.get_world_size()
    model = build_model(spec, spec.seq_len, seed=0)
    optimizer = (torch.optim.SGD(model.parameters(), lr=0.05) if optimizer_name == "sgd"
                 else torch.optim.AdamW(model.parameters(), lr=1e-3))
    module, optimizer = attach(model, optimizer, sync)
    losses, sent = [], []
    for step in range(steps):
        inputs, targets = global_batch(step, 8, spec.seq_len)
        inputs, targets = rank_slice(inputs, rank, world), rank_slice(targets, rank, world)
        with counted_bytes() as count:
            loss = cross_entropy(module(inputs), targets)
            loss.backward()
            optimizer.step()
        optimizer.zero_grad()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
        sent.append(count[0])
    return {"losses": losses, "bytes": sent}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("cases", nargs="+", help="METHOD[:k=v,...]@sgd|adamw")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.use_deterministic_algorithms(True)
    results = {}
    for case in args.cases:
        method, _, optimizer_name = case.rpartition("@")
        results[case] = train(method, optimizer_name, args.model, args.steps)
    if dist.get_rank() == 0:
        args.out.write_text(json.dumps(results))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
