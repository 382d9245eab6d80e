"""GNN training inside the parts on torch.distributed: the ``partition_local`` and ``llcg`` strategies of
:mod:`plait.workloads.gnn.cost`, on a generated graph (:mod:`plait.run.graph`) with PyG's layers.

- ``partition_local``: each rank keeps only its part's subgraph (the edges with both ends in the part) and its
  features, samples its batches inside it (:mod:`plait.run.sampler`) and trains in DDP: no feature moves between
  ranks, and the edges the cut drops are lost to training (communication-free sampling, as 000-01 samples each
  GPU's mini-batch without communication);
- ``llcg`` (000-16: Ramezani et al., "Learn Locally, Correct Globally", ICLR 2022, Alg. 1): each rank trains its own
  copy of the model on partition-local batches for ``K`` steps without synchronising, then the copies are averaged
  (one all-reduce of the parameters) and the server, rank 0, which holds the whole graph and every feature, takes
  ``S`` correction steps on mini-batches sampled from the whole graph and sends the corrected model to every rank
  (a broadcast). ``K`` and ``S`` are the cost model's :data:`plait.workloads.gnn.cost.LLCG_LOCAL_STEPS` and
  :data:`plait.workloads.gnn.cost.LLCG_CORRECTIONS` unless given.

``--reference W`` trains the same ``W`` parts' batches in one process: one model and the mean of the parts' losses
(partition_local: the gradient DDP's average gives), or ``W`` copies averaged and corrected (llcg).

Run: ``python -m torch.distributed.run --nproc-per-node 2
-m plait.workloads.gnn.local_worker --strategy llcg --out run.json``.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
import torch.nn.functional as fn

from plait.run.config import read_config
from plait.run.gloo_job import run_job
from plait.run.graph import Graph, generate
from plait.run.sampler import batch_generator, draw_seeds, sample
from plait.workloads.gnn.config import GnnLocalConfig
from plait.workloads.gnn.worker import build_model

Part = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
"""A part's subgraph: row pointers, neighbours (part-local ids), features, labels."""


def part_subgraph(graph: Graph, part: int) -> Part:
    """The subgraph of ``part``'s nodes and the edges with both ends among them, in part-local ids."""
    lo, hi = graph.part_range(part)
    first, last = int(graph.rowptr_N1[lo]), int(graph.rowptr_N1[hi])
    col = graph.col_E2[first:last]
    row = torch.repeat_interleave(torch.arange(hi - lo), graph.degrees()[lo:hi])
    inside = (col >= lo) & (col < hi)
    rowptr = torch.zeros(hi - lo + 1, dtype=torch.long)
    rowptr[1:] = torch.cumsum(torch.bincount(row[inside], minlength=hi - lo), 0)
    return rowptr, col[inside] - lo, graph.x_NF[lo:hi], graph.y_N[lo:hi]


def local_loss(model: torch.nn.Module, part: Part, args: GnnLocalConfig, step: int, index: int) -> torch.Tensor:
    """The loss of part ``index``'s batch at ``step``, sampled inside the part."""
    rowptr, col, x, y = part
    gen = batch_generator(args.seed, step, index)
    batch = sample(rowptr, col, draw_seeds(0, rowptr.numel() - 1, args.batch, gen), tuple(args.fanouts), gen)
    out = model(x[batch.nodes_U], batch.edge_index_2M)
    return fn.cross_entropy(out[: args.batch], y[batch.nodes_U[: args.batch]])


def correct(model: torch.nn.Module, graph: Graph, args: GnnLocalConfig, round_: int, world: int) -> None:
    """The server's correction steps: SGD on mini-batches of the whole graph (every feature held)."""
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    for s in range(args.corrections):
        gen = batch_generator(args.seed, round_ * args.corrections + s, world)  # a stream no part draws from
        batch = sample(graph.rowptr_N1, graph.col_E2, draw_seeds(0, graph.nodes, args.batch, gen),
                       tuple(args.fanouts), gen)
        out = model(graph.x_NF[batch.nodes_U], batch.edge_index_2M)
        loss = fn.cross_entropy(out[: args.batch], graph.y_N[batch.nodes_U[: args.batch]])
        opt.zero_grad()
        loss.backward()
        opt.step()


def train(args: GnnLocalConfig, reference: int = 0) -> dict[str, list]:
    world = reference or dist.get_world_size()
    graph = generate(args.nodes, args.edges, world, args.features, args.classes, exponent=args.exponent,
                     mix=args.mix, seed=args.seed)
    model = build_model(args.kind, args.features, args.hidden, args.classes, len(args.fanouts), args.heads)
    if reference:
        return _reference(args, graph, model, world)
    rank = dist.get_rank()
    part = part_subgraph(graph, rank)
    if rank != 0 or args.strategy != "llcg":  # only LLCG's server keeps the whole graph
        graph = Graph(torch.zeros(1, dtype=torch.long), torch.empty(0, dtype=torch.long), torch.empty(0),
                      torch.empty(0), world)
    trained = torch.nn.parallel.DistributedDataParallel(model) if args.strategy == "partition_local" else model
    opt = torch.optim.SGD(trained.parameters(), lr=args.lr)
    losses = []
    for step in range(args.steps):
        loss = local_loss(trained, part, args, step, rank)
        opt.zero_grad()
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(float(mean) / world)
        if args.strategy == "llcg" and (step + 1) % args.local_steps == 0:
            with torch.no_grad():
                for p in model.parameters():  # average the copies
                    dist.all_reduce(p)
                    p /= world
            if rank == 0:
                correct(model, graph, args, step // args.local_steps, world)
            with torch.no_grad():
                for p in model.parameters():
                    dist.broadcast(p, 0)
    return {"losses": losses}


def _reference(args: GnnLocalConfig, graph: Graph, model: torch.nn.Module, world: int) -> dict[str, list]:
    """One process (module docstring)."""
    parts = [part_subgraph(graph, p) for p in range(world)]
    copies = [model] if args.strategy == "partition_local" else [copy.deepcopy(model) for _ in range(world)]
    opts = [torch.optim.SGD(m.parameters(), lr=args.lr) for m in copies]
    losses = []
    for step in range(args.steps):
        if args.strategy == "partition_local":
            loss = sum(local_loss(model, parts[p], args, step, p) for p in range(world)) / world
            opts[0].zero_grad()
            loss.backward()  # type: ignore[union-attr]
            opts[0].step()
            losses.append(float(loss.detach()))  # type: ignore[union-attr]
            continue
        total = 0.0
        for p, (m, opt) in enumerate(zip(copies, opts, strict=True)):
            loss = local_loss(m, parts[p], args, step, p)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach())
        losses.append(total / world)
        if (step + 1) % args.local_steps == 0:
            with torch.no_grad():
                for ps in zip(*(m.parameters() for m in copies), strict=True):
                    mean = sum(ps[1:], ps[0].clone()) / world
                    for q in ps:
                        q.copy_(mean)
            correct(copies[0], graph, args, step // args.local_steps, world)
            with torch.no_grad():
                for m in copies[1:]:
                    for q, s in zip(m.parameters(), copies[0].parameters(), strict=True):
                        q.copy_(s)
    return {"losses": losses}


def main(argv: list[str] | None = None) -> int:
    args = read_config(GnnLocalConfig, argv, prog="plait.workloads.gnn.local_worker", description=__doc__)
    return run_job(args.out, bool(args.reference), lambda: train(args, args.reference))


if __name__ == "__main__":
    raise SystemExit(main())
