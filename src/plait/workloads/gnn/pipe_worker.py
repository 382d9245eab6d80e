"""Full-graph GNN training with GNNPipe's layer pipeline on torch.distributed (000-11: Chen et al.,
"GNNPipe: Scaling Deep GNN Training with Pipelined Model Parallelism", arXiv 2308.10087, Sec. 3-4;
:mod:`plait.workloads.gnn.pipe` costs it).

Rank ``s`` holds GraphSAGE layer ``s`` (one layer per rank) and the graph's structure; rank 0 also the features. The
nodes are cut into ``C`` chunks of consecutive ids, which flow through the ranks one after another. A layer computes
a chunk's nodes from all their neighbours: the chunk's own rows are the embeddings just received, the other rows
come from the rank's store of historical embeddings, the last embeddings it received for those nodes (this epoch's
for the chunks already through, the previous epoch's for the rest; zeros before the first), held as constants
(GNNPipe's historical embeddings: no gradient flows into them). Every chunk's forward pass runs first; the last
rank takes each chunk's loss (its nodes' cross-entropy, summed, over all nodes) and the gradients of each chunk's
received embeddings flow back rank by rank; each rank then takes one SGD step on its layer (full-graph training: one
update per epoch). Sent per epoch: each chunk's output embeddings forward (``N x b`` fp32 per boundary) and the
gradients of its inputs back (the same), counted in bytes.

With one chunk nothing is historical and the epoch is plain full-graph training (tested); ``--reference W`` runs the
same schedule in one process.

Run: ``python -m torch.distributed.run --nproc-per-node 2
-m plait.workloads.gnn.pipe_worker --chunks 4 --out run.json``.
Tensor legend: ``N`` nodes, ``K`` a chunk's nodes, ``E`` directed edges into a chunk.
"""

from __future__ import annotations

import itertools

import torch
import torch.distributed as dist
import torch.nn.functional as fn

from plait.run.config import read_config
from plait.run.gloo_job import run_job
from plait.run.graph import Graph, generate
from plait.workloads.gnn.config import GnnPipeConfig


def build_layers(features: int, hidden: int, classes: int, layers: int) -> list[torch.nn.Module]:
    """PyG SAGEConv layers (mean aggregation), seeded identically everywhere."""
    from torch_geometric.nn import SAGEConv

    torch.manual_seed(0)
    widths = [features, *[hidden] * (layers - 1), classes]
    return [SAGEConv(a, b) for a, b in itertools.pairwise(widths)]


def chunk_edges(graph: Graph, lo: int, hi: int) -> torch.Tensor:
    """Edges into nodes ``lo .. hi - 1`` as a bipartite index: global source ids, chunk-local targets."""
    first, last = int(graph.rowptr_N1[lo]), int(graph.rowptr_N1[hi])
    target_E = torch.repeat_interleave(torch.arange(hi - lo), graph.degrees()[lo:hi])
    return torch.stack([graph.col_E2[first:last], target_E])


def stage_forward(layer: torch.nn.Module, history_NF: torch.Tensor, x_KF: torch.Tensor, lo: int, hi: int,
                  edges_2E: torch.Tensor, last: bool) -> torch.Tensor:
    """One layer on one chunk: the chunk's fresh rows, the others historical (constants)."""
    x_NF = torch.cat([history_NF[:lo], x_KF, history_NF[hi:]])
    out_KF = layer((x_NF, x_KF), edges_2E)
    return out_KF if last else fn.relu(out_KF)


def _accumulate(params: list[torch.Tensor], grads: tuple[torch.Tensor, ...]) -> None:
    for p, g in zip(params, grads, strict=True):
        p.grad = g if p.grad is None else p.grad + g


def bounds(nodes: int, chunks: int) -> list[tuple[int, int]]:
    return [(c * nodes // chunks, (c + 1) * nodes // chunks) for c in range(chunks)]


def train(args: GnnPipeConfig, reference: int = 0) -> dict[str, list]:
    world = reference or dist.get_world_size()
    if world != args.layers:
        raise SystemExit(f"--layers {args.layers} must equal the ranks ({world}): one GraphSAGE layer per rank")
    graph = generate(args.nodes, args.edges, 1, args.features, args.classes, exponent=args.exponent, seed=args.seed)
    layers = build_layers(args.features, args.hidden, args.classes, args.layers)
    widths = [args.features, *[args.hidden] * (args.layers - 1)]
    spans = bounds(graph.nodes, args.chunks)
    edges = [chunk_edges(graph, lo, hi) for lo, hi in spans]
    if reference:
        return _reference(args, graph, layers, widths, spans, edges)
    rank = dist.get_rank()
    layer, last = layers[rank], rank == world - 1
    history = graph.x_NF if rank == 0 else torch.zeros(graph.nodes, widths[rank])  # features never go stale
    opt = torch.optim.SGD(layer.parameters(), lr=args.lr)
    losses, sent = [], []
    for _ in range(args.steps):
        outs, inputs, total, moved = [], [], torch.zeros(()), 0
        for (lo, hi), chunk_edges_2E in zip(spans, edges, strict=True):
            x_KF = graph.x_NF[lo:hi] if rank == 0 else torch.empty(hi - lo, widths[rank])
            if rank > 0:
                dist.recv(x_KF, rank - 1)
                history[lo:hi] = x_KF
                x_KF.requires_grad_(True)
            out_KF = stage_forward(layer, history, x_KF, lo, hi, chunk_edges_2E, last)
            if last:
                total = total + fn.cross_entropy(out_KF, graph.y_N[lo:hi], reduction="sum") / graph.nodes
            else:
                dist.send(out_KF.detach().contiguous(), rank + 1)
                moved += out_KF.numel() * 4
            outs.append(out_KF)
            inputs.append(x_KF)
        opt.zero_grad()
        params = list(layer.parameters())
        if last:  # the loss's gradients: the layer's, and each chunk's received embeddings' to send back
            grads = torch.autograd.grad(total, params + (inputs if rank > 0 else []))
            back = list(grads[len(params):])
            _accumulate(params, grads[: len(params)])
        else:
            back = []
            for c in range(len(spans)):  # the next rank's gradients, chunk by chunk
                grad_out = torch.empty_like(outs[c])
                dist.recv(grad_out, rank + 1)
                grads = torch.autograd.grad(outs[c], params + ([inputs[c]] if rank > 0 else []), grad_out)
                _accumulate(params, grads[: len(params)])
                back.extend(grads[len(params):])
                if back:
                    dist.send(back.pop().contiguous(), rank - 1)
                    moved += inputs[c].numel() * 4
        for grad_KF in back:  # the last rank sends its chunks' gradients in order
            dist.send(grad_KF.contiguous(), rank - 1)
            moved += grad_KF.numel() * 4
        opt.step()
        loss = total.detach().clone() if last else torch.zeros(())
        dist.broadcast(loss, world - 1)
        losses.append(float(loss))
        sent.append(moved)
    every: list[list[int]] = [[] for _ in range(world)]
    dist.all_gather_object(every, sent)
    return {"losses": losses, "bytes_sent": every}


def _reference(args: GnnPipeConfig, graph: Graph, layers: list[torch.nn.Module], widths: list[int],
               spans: list[tuple[int, int]], edges: list[torch.Tensor]) -> dict[str, list]:
    """The same schedule in one process: the ranks' stores are kept side by side."""
    histories = [graph.x_NF, *[torch.zeros(graph.nodes, w) for w in widths[1:]]]  # stage 0's: the features
    params = [p for layer in layers for p in layer.parameters()]
    opt = torch.optim.SGD(params, lr=args.lr)
    losses = []
    for _ in range(args.steps):
        total = torch.zeros(())
        for (lo, hi), chunk_edges_2E in zip(spans, edges, strict=True):
            x_KF = graph.x_NF[lo:hi]
            for s, layer in enumerate(layers):
                if s > 0:
                    histories[s][lo:hi] = x_KF.detach()
                x_KF = stage_forward(layer, histories[s], x_KF, lo, hi, chunk_edges_2E, s == len(layers) - 1)
            total = total + fn.cross_entropy(x_KF, graph.y_N[lo:hi], reduction="sum") / graph.nodes
        opt.zero_grad()
        total.backward()
        opt.step()
        losses.append(float(total.detach()))
    return {"losses": losses}


def main(argv: list[str] | None = None) -> int:
    args = read_config(GnnPipeConfig, argv, prog="plait.workloads.gnn.pipe_worker", description=__doc__)
    return run_job(args.out, bool(args.reference), lambda: train(args, args.reference))


if __name__ == "__main__":
    raise SystemExit(main())
