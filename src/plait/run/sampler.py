"""Uniform neighbour sampling for mini-batch GNN training (issue 18; GraphSAGE: Hamilton et al., NeurIPS 2017,
Alg. 2), as PyG's ``NeighborLoader`` does it: at each hop every node first reached at the previous hop draws
``min(fanout, degree)`` of its neighbours without replacement; the batch's nodes are the seeds, then each hop's new
nodes in ascending id; its edges point from the drawn neighbour to the node that drew it.

Written here because PyG's ``NeighborLoader`` needs ``pyg-lib`` or ``torch-sparse`` for its sampling kernel, and
neither has a wheel on PyPI for this project's torch ("'NeighborSampler' requires either 'pyg-lib' or
'torch-sparse'", torch_geometric 2.8). PyG's layers run on what this returns.

Tensor legend: ``N`` graph nodes, ``E2`` directed edges, ``F`` frontier nodes, ``T`` neighbours of the frontier,
``S`` drawn neighbours, ``U`` nodes of the batch, ``M`` edges of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Batch:
    """A sampled mini-batch: global ids of its nodes (seeds first) and its edges in batch-local ids."""

    nodes_U: torch.Tensor
    edge_index_2M: torch.Tensor
    new_per_hop: tuple[int, ...]
    """Nodes first reached at each hop, the seeds first."""
    drawn_per_hop: tuple[int, ...]


def sample(rowptr_N1: torch.Tensor, col_E2: torch.Tensor, seeds: torch.Tensor, fanouts: tuple[int, ...],
           gen: torch.Generator) -> Batch:
    """The batch of ``seeds`` (distinct) under ``fanouts`` (module docstring)."""
    local_N = torch.full((rowptr_N1.numel() - 1,), -1, dtype=torch.long)
    local_N[seeds] = torch.arange(seeds.numel())
    nodes, frontier_F = [seeds], seeds
    srcs, dsts, new, drawn = [], [], [seeds.numel()], []
    count = seeds.numel()
    for fanout in fanouts:
        start_F = rowptr_N1[frontier_F]
        deg_F = rowptr_N1[frontier_F + 1] - start_F
        seg_T = torch.repeat_interleave(torch.arange(frontier_F.numel()), deg_F)
        first_F = torch.cumsum(deg_F, 0) - deg_F
        # each slot's place in its node's list: of a neighbour as stored, and of a slot of the shuffled list
        offset_T = torch.arange(seg_T.numel()) - first_F[seg_T]
        keys_T = torch.rand(seg_T.numel(), generator=gen, dtype=torch.float64)
        order_T = torch.argsort(seg_T.double() + keys_T)  # a random order inside each node's neighbours
        picked_S = order_T[offset_T < torch.clamp(deg_F, max=fanout)[seg_T]]
        neighbour_S = col_E2[start_F[seg_T[picked_S]] + offset_T[picked_S]]
        target_S = frontier_F[seg_T[picked_S]]
        fresh = torch.unique(neighbour_S[local_N[neighbour_S] < 0])
        local_N[fresh] = torch.arange(count, count + fresh.numel())
        count += fresh.numel()
        srcs.append(local_N[neighbour_S])
        dsts.append(local_N[target_S])
        nodes.append(fresh)
        new.append(fresh.numel())
        drawn.append(neighbour_S.numel())
        frontier_F = fresh
    edge_index = torch.stack([torch.cat(srcs), torch.cat(dsts)]) if srcs else torch.empty(2, 0, dtype=torch.long)
    return Batch(torch.cat(nodes), edge_index, tuple(new), tuple(drawn))


def batch_generator(seed: int, step: int, part: int) -> torch.Generator:
    """The generator of one part's batch at one step: the same in every process that samples it."""
    return torch.Generator().manual_seed(seed * 1_000_003 + step * 1_009 + part)


def draw_seeds(lo: int, hi: int, batch: int, gen: torch.Generator) -> torch.Tensor:
    """``batch`` distinct seed nodes of the part ``[lo, hi)``."""
    if batch > hi - lo:
        raise ValueError(f"batch={batch} seeds exceed the part's {hi - lo} nodes")
    return lo + torch.randperm(hi - lo, generator=gen)[:batch]
