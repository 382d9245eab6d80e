"""Data-parallel GNN training with neighbour sampling on torch.distributed: one rank per part of a
generated graph (:mod:`plait.run.graph`), PyG's GraphSAGE, GCN, GAT or a graph transformer wrapped in DDP.

Each rank holds the graph's structure and only its part's features (plus, with ``--cache``, the features of the
graph's highest-degree nodes: PaGraph's static cache). Every step it draws ``--batch`` seeds from its part, samples
their neighbourhoods (:mod:`plait.run.sampler`) and fetches the features it lacks from their owners: an all-to-all
of counts (one int64 per peer), one of the ids, one of the features back (``all_to_all_single``, whose bytes to peers
are counted: :mod:`plait.run.counted`). ``--reference W`` trains the same ``W`` parts' batches in one process (the
mean of their losses, the gradient DDP's average gives) and writes, per step, the ids each part would request of
each other: what the cost model's byte accounting (:func:`plait.workloads.gnn.cost.rank_fetch_bytes`) is applied to.

Run: ``python -m torch.distributed.run --nproc-per-node 2
-m plait.workloads.gnn.worker --out run.json`` (or ``--reference 2``).

Tensor legend: ``U`` batch nodes, ``F`` features, ``C`` classes, ``B`` seeds, ``W`` ranks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import torch
import torch.distributed as dist
import torch.nn.functional as fn

from plait.run.bulk_sampler import adjacency, partitioned_rows, replicated_rows, sample_bulk
from plait.run.config import read_config
from plait.run.counted import Counted
from plait.run.gloo_job import run_job
from plait.run.graph import Graph, generate
from plait.run.sampler import Batch, batch_generator, draw_seeds, sample
from plait.workloads.gnn.config import GnnConfig


def build_model(kind: str, features: int, hidden: int, classes: int, layers: int, heads: int = 1) -> torch.nn.Module:
    """PyG's GraphSAGE, GCN, GAT or GIN, or a stack of TransformerConv layers (the graph transformer of
    :class:`GraphTransformer`); mean aggregation, ReLU between layers, no dropout, seeded identically everywhere."""
    from torch_geometric.nn.models import GAT, GCN, GIN, GraphSAGE

    torch.manual_seed(0)
    if kind == "gin":
        return GIN(features, hidden, layers, classes)
    if kind == "transformer":
        return GraphTransformer(features, hidden, classes, layers, heads)
    if kind == "gat":
        return GAT(features, hidden, layers, classes, heads=heads)
    return (GraphSAGE if kind == "sage" else GCN)(features, hidden, layers, classes)


class GraphTransformer(torch.nn.Module):
    """Graph transformer layers (Shi et al., IJCAI 2021, Eq. 3-5: PyG ``TransformerConv``, multi-head attention over
    each node's sampled neighbours with a skip map), laid out as PyG's ``GAT`` model lays out its heads: hidden
    layers concatenate ``heads`` heads of ``hidden / heads`` channels, the last averages ``heads`` heads of
    ``classes`` channels."""

    def __init__(self, features: int, hidden: int, classes: int, layers: int, heads: int) -> None:
        from torch_geometric.nn import TransformerConv

        super().__init__()
        widths = [features, *[hidden] * (layers - 1)]
        self.convs = torch.nn.ModuleList(TransformerConv(a, hidden // heads, heads=heads) for a in widths[:-1])
        self.convs.append(TransformerConv(widths[-1], classes, heads=heads, concat=False))

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        for conv in self.convs[:-1]:
            x = fn.relu(conv(x, edge_index))
        return self.convs[-1](x, edge_index)  # type: ignore[no-any-return]


def cached_nodes(graph: Graph, fraction: float) -> torch.Tensor:
    """The highest-degree ``fraction`` of the nodes (ties to the lower id), ascending."""
    count = int(fraction * graph.nodes)
    order = torch.argsort(-graph.degrees() * graph.nodes + torch.arange(graph.nodes))
    return torch.sort(order[:count]).values


def requests(graph: Graph, batch: Batch, rank: int, cached_N: torch.Tensor) -> list[torch.Tensor]:
    """Where in the batch the nodes this rank asks each part for lie: held elsewhere and not cached."""
    owner_U = graph.owner(batch.nodes_U)
    missing_U = (owner_U != rank) & ~cached_N[batch.nodes_U]
    return [(missing_U & (owner_U == p)).nonzero().flatten() for p in range(graph.parts)]


def fetch(x_local: torch.Tensor, lo: int, asked: list[torch.Tensor], counter: Counted,
          into: torch.Tensor | None = None) -> torch.Tensor:
    """Features of the ids asked of each part (in that order), from their owners: counts, ids, features back
    (received into the first rows of ``into`` where given)."""
    send_counts = torch.tensor([a.numel() for a in asked], dtype=torch.long)
    recv_counts = torch.empty_like(send_counts)
    counter.all_to_all(recv_counts, send_counts)
    ids_in = torch.empty(int(recv_counts.sum()), dtype=torch.long)
    counter.all_to_all(ids_in, torch.cat(asked), recv_counts.tolist(), send_counts.tolist())
    wanted = int(send_counts.sum())
    got = torch.empty(wanted, x_local.shape[1]) if into is None else into[:wanted]
    counter.all_to_all(got, x_local[ids_in - lo], send_counts.tolist(), recv_counts.tolist())
    return got


def with_room(table: torch.Tensor, held: int, rows: int) -> torch.Tensor:
    """``table`` (its first ``held`` rows the rank's part and cache) with room for ``rows`` fetched rows after them."""
    if table.shape[0] >= held + rows:
        return table
    grown = torch.empty(held + max(rows, 2 * (table.shape[0] - held)), table.shape[1])
    grown[:held] = table[:held]
    return grown


def features_of(batch: Batch, lo: int, hi: int, cached: torch.Tensor, cached_N: torch.Tensor,
                where: list[torch.Tensor], table: torch.Tensor) -> torch.Tensor:
    """The batch's feature matrix in one gather from ``table``: the rank's part (rows ``0 .. hi - lo``), its cache
    (rows of ``cached``, ascending, next), then the rows fetched for the batch positions ``where``."""
    nodes_U = batch.nodes_U
    rows_U = torch.empty_like(nodes_U)
    local_U = (nodes_U >= lo) & (nodes_U < hi)
    rows_U[local_U] = nodes_U[local_U] - lo
    in_cache_U = ~local_U & cached_N[nodes_U]
    rows_U[in_cache_U] = (hi - lo) + torch.searchsorted(cached, nodes_U[in_cache_U])
    fetched = torch.cat(where)
    rows_U[fetched] = (hi - lo) + cached.numel() + torch.arange(fetched.numel())
    return table.index_select(0, rows_U)


def train(args: GnnConfig, reference: int = 0) -> dict[str, list]:
    graph = generate(args.nodes, args.edges, reference or dist.get_world_size(), args.features, args.classes,
                     exponent=args.exponent, mix=args.mix, seed=args.seed)
    model = build_model(args.kind, args.features, args.hidden, args.classes, len(args.fanouts), args.heads)
    cached = cached_nodes(graph, args.cache)
    cached_N = torch.zeros(graph.nodes, dtype=torch.bool)
    cached_N[cached] = True
    if reference:
        return _reference(args, graph, model, cached_N, reference)
    rank = dist.get_rank()
    lo, hi = graph.part_range(rank)
    table, y_local = torch.cat([graph.x_NF[lo:hi], graph.x_NF[cached]]), graph.y_N[lo:hi].clone()
    held = table.shape[0]
    graph = replace(graph, x_NF=torch.empty(0), y_N=torch.empty(0))  # the rank keeps its part and the cache only
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    counter, sampler_counter, losses, sent, times = Counted(), Counted(), [], [], []
    phases: dict[str, list[float]] = {"sample": [], "fetch": [], "train": []}
    draw = _sampler(args, graph, rank, sampler_counter)
    queued: list[Batch] = []
    for step in range(args.steps):
        start, before = time.perf_counter(), counter.sent
        if not queued:
            queued = draw(list(range(step, min(step + args.bulk, args.steps))))
        batch = queued.pop(0)
        sampled = time.perf_counter()
        where = requests(graph, batch, rank, cached_N)
        table = with_room(table, held, sum(w.numel() for w in where))
        fetch(table[: hi - lo], lo, [batch.nodes_U[w] for w in where], counter, into=table[held:])
        x_UF = features_of(batch, lo, hi, cached, cached_N, where, table)
        fetched = time.perf_counter()
        out_UC = ddp(x_UF, batch.edge_index_2M)
        loss = fn.cross_entropy(out_UC[: args.batch], y_local[batch.nodes_U[: args.batch] - lo])
        opt.zero_grad()
        loss.backward()
        opt.step()
        trained = time.perf_counter()
        for name, (a, b) in (("sample", (start, sampled)), ("fetch", (sampled, fetched)), ("train", (fetched, trained))):
            phases[name].append(b - a)
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(float(mean) / dist.get_world_size())
        sent.append(counter.sent - before)
        times.append(time.perf_counter() - start)
    every: list[list[int]] = [[] for _ in range(dist.get_world_size())]
    dist.all_gather_object(every, sent)
    sampling: list[int] = [0] * dist.get_world_size()
    dist.all_gather_object(sampling, sampler_counter.sent)
    return {"losses": losses, "bytes_sent": every, "step_times_s": times, "phase_s": phases,
            "sampling_bytes_sent": sampling}


def _sampler(args: GnnConfig, graph: Graph, rank: int, counter: Counted) -> Callable[[list[int]], list[Batch]]:
    """Steps -> this rank's batches for them: one at a time by :func:`plait.run.sampler.sample`, or in one bulk by
    :func:`plait.run.bulk_sampler.sample_bulk` over the whole adjacency or this rank's rows of it."""
    lo, hi = graph.part_range(rank)
    fanouts = tuple(args.fanouts)
    if args.sampler == "loop":
        def one(steps: list[int]) -> list[Batch]:
            gen = batch_generator(args.seed, steps[0], rank)
            return [sample(graph.rowptr_N1, graph.col_E2, draw_seeds(lo, hi, args.batch, gen), fanouts, gen)]
        return one
    if args.adjacency == "replicated":
        rows_of = replicated_rows(adjacency(graph.rowptr_N1, graph.col_E2, graph.nodes))
    else:
        first, last = int(graph.rowptr_N1[lo]), int(graph.rowptr_N1[hi])
        block = adjacency(graph.rowptr_N1[lo: hi + 1] - first, graph.col_E2[first:last], graph.nodes)
        rows_of = partitioned_rows(block, lo, graph.owner, graph.parts, counter)

    def bulk(steps: list[int]) -> list[Batch]:
        gens = [batch_generator(args.seed, step, rank) for step in steps]
        return sample_bulk(rows_of, graph.nodes, [draw_seeds(lo, hi, args.batch, g) for g in gens], fanouts, gens)
    return bulk


def _reference(args: GnnConfig, graph: Graph, model: torch.nn.Module, cached_N: torch.Tensor,
               world: int) -> dict[str, list]:
    """One process: each step, the mean of the ``world`` parts' losses on their batches (module docstring)."""
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    losses, asked, rows = [], [], []
    for step in range(args.steps):
        total, per_part, drawing = torch.zeros(()), [], []
        for part in range(world):
            gen = batch_generator(args.seed, step, part)
            lo, hi = graph.part_range(part)
            batch = sample(graph.rowptr_N1, graph.col_E2, draw_seeds(lo, hi, args.batch, gen), tuple(args.fanouts), gen)
            per_part.append([int(r.numel()) for r in requests(graph, batch, part, cached_N)])
            drawing.append(drawing_rows(graph, batch))
            out_UC = model(graph.x_NF[batch.nodes_U], batch.edge_index_2M)
            total = total + fn.cross_entropy(out_UC[: args.batch], graph.y_N[batch.nodes_U[: args.batch]])
        loss = total / world
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        asked.append(per_part)
        rows.append(drawing)
    return {"losses": losses, "requests": asked, "drawing_rows": rows}


def drawing_rows(graph: Graph, batch: Batch) -> list[list[list[int]]]:
    """Per hop, the batch's drawing nodes held by each part and their neighbour slots: ``[[rows per part],
    [entries per part]]`` (what a partitioned adjacency's owners serve: :mod:`plait.run.bulk_sampler`)."""
    out, start = [], 0
    degrees = graph.degrees()
    for count in batch.new_per_hop[:-1]:
        frontier = batch.nodes_U[start: start + count]
        owner = graph.owner(frontier)
        out.append([torch.bincount(owner, minlength=graph.parts).tolist(),
                    torch.zeros(graph.parts, dtype=torch.long).index_add_(0, owner, degrees[frontier]).tolist()])
        start += count
    return out


def main(argv: list[str] | None = None) -> int:
    args = read_config(GnnConfig, argv, prog="plait.workloads.gnn.worker", description=__doc__)
    return run_job(args.out, bool(args.reference), lambda: train(args, args.reference))


if __name__ == "__main__":
    raise SystemExit(main())
