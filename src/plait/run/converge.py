"""One rank of ``plait converge`` (launched by torchrun): trains the reference model on the shipped corpus under
each synchronization method given, from the same initial weights and on the same batches, and writes from rank 0
every step's mean loss and the payload bytes the step handed to collectives and sends
(:func:`plait.run.counting.counted_bytes`), rank 0's and every rank's.

A case is ``METHOD[:key=value,...]@OPTIMIZER`` with OPTIMIZER ``sgd`` (lr 0.05) or ``adamw`` (lr 1e-3, torch's
other defaults); the inner optimizer of local SGD and DiLoCo is that optimizer. With ``--cluster`` naming a cluster
that spans sites, the ranks are laid out on it and all-reduce hierarchically across them (:mod:`plait.run.sites`).
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

from plait.run.config import read_config
from plait.run.counting import counted_bytes
from plait.run.data import global_batch, rank_slice
from plait.run.lifecycle import exit_without_teardown
from plait.run.model import build_model
from plait.run.outer_loop import skips_gradient
from plait.run.replica_grads import reduce_gradients
from plait.run.sites import Reducer, build_reducer, named_site_gpus
from plait.run.sync import attach, named_profile
from plait.run.train import cross_entropy
from plait.run.workload_configs import LEARNING_RATES, ConvergeConfig
from plait.sync import parse
from plait.workload.catalog import resolve_model
from plait.workload.tensors import parameter_shapes


def train(case: str, model_path: str, steps: int, batch: int, replicas: Reducer,
          cluster: str = "") -> dict[str, list[float]]:
    """Losses (mean over ranks) and bytes sent, per step, of one case over the ``replicas`` (every rank); the
    ``cluster`` named gives DreamDDP's profiled schedule its times (:mod:`plait.cost.partial_times`)."""
    spec_text, _, optimizer_name = case.rpartition("@")
    if optimizer_name not in LEARNING_RATES:
        raise ValueError(f"case {case!r}: optimizer must be one of {', '.join(LEARNING_RATES)}")
    spec, sync = resolve_model(model_path), parse(spec_text)
    rank, world = dist.get_rank(), dist.get_world_size()
    model = build_model(spec, spec.seq_len, seed=0)
    lr = LEARNING_RATES[optimizer_name]
    optimizer = (torch.optim.SGD(model.parameters(), lr=lr) if optimizer_name == "sgd"
                 else torch.optim.AdamW(model.parameters(), lr=lr))
    profile = named_profile(cluster, stride=1, tokens=batch // world * spec.seq_len)
    module, optimizer = attach(model, optimizer, sync, parameter_shapes(spec), replicas, profile)
    losses, sent = [], []
    for step in range(steps):
        inputs, targets = global_batch(step, batch, spec.seq_len)
        inputs, targets = rank_slice(inputs, rank, world), rank_slice(targets, rank, world)
        with counted_bytes() as count:
            if skips_gradient(optimizer):  # PALSGD's pseudo-synchronization step
                with torch.no_grad():
                    loss = cross_entropy(module(inputs), targets)  # measured only: the step trains on nothing
                optimizer.step()
            else:
                loss = cross_entropy(module(inputs), targets)
                loss.backward()
                reduce_gradients(optimizer)  # PALSGD's warm-up averages gradients (others: DDP or nothing)
                optimizer.step()
        optimizer.zero_grad()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
        sent.append(count[0])
    pending = getattr(optimizer, "pending", None)  # Pipe-SGD's last all-reduce or gossip's last exchange, in flight
    if isinstance(pending, tuple):
        pending[1].wait()
    elif hasattr(pending, "wait"):  # gossip's delay-by-one exchange (DreamDDP's list is empty after a step)
        pending.wait()
    by_rank: list[list[int]] = [[] for _ in range(world)]
    dist.all_gather_object(by_rank, sent)  # the point-to-point methods send different bytes from different ranks
    return {"losses": losses, "bytes": sent, "bytes_by_rank": by_rank}


def main(argv: list[str] | None = None) -> int:
    args = read_config(ConvergeConfig, argv, prog="plait.run.converge", description=__doc__)
    dist.init_process_group("gloo")
    torch.use_deterministic_algorithms(True)
    replicas = build_reducer(dist.group.WORLD, named_site_gpus(args.cluster))  # type: ignore[arg-type]
    results = {case: train(case, args.model, args.steps, args.batch, replicas, args.cluster) for case in args.cases}
    if dist.get_rank() == 0:
        args.out.write_text(json.dumps(results))
    dist.barrier()
    dist.destroy_process_group()
    exit_without_teardown(0)


if __name__ == "__main__":
    sys.exit(main())
