"""Uniform neighbour sampling for mini-batch GNN training (GraphSAGE: Hamilton et al., NeurIPS 2017,
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
    growing = Growing(rowptr_N1.numel() - 1, seeds)
    frontier_F = seeds
    for fanout in fanouts:
        start_F = rowptr_N1[frontier_F]
        deg_F = rowptr_N1[frontier_F + 1] - start_F
        keys_T = torch.rand(int(deg_F.sum()), generator=gen, dtype=torch.float64)
        row_S, place_S = pick(deg_F, torch.cumsum(deg_F, 0) - deg_F, fanout, keys_T)
        frontier_F = growing.add(col_E2[start_F[row_S] + place_S], frontier_F[row_S])
    return growing.batch()


def pick(deg_R: torch.Tensor, first_R: torch.Tensor, fanout: int,
         keys_T: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Of each row's ``deg_R`` neighbour slots (row ``r``'s from ``first_R[r]`` on, ``T`` in all), the
    ``min(fanout, d)`` of smallest ``keys_T``: each kept slot's row and its place in the row, rows in order."""
    seg_T = torch.repeat_interleave(torch.arange(deg_R.numel()), deg_R)
    offset_T = torch.arange(seg_T.numel()) - first_R[seg_T]  # a slot's place in its row, as stored
    order_T = torch.argsort(seg_T.double() + keys_T)  # a random order inside each row
    picked_S = order_T[offset_T < torch.clamp(deg_R, max=fanout)[seg_T]]  # sorted places line up with rows' slots
    return seg_T[picked_S], offset_T[picked_S]


class Growing:
    """A batch as it is sampled: its nodes (seeds first, then each hop's new nodes in ascending id) and edges in
    batch-local ids."""

    def __init__(self, nodes: int, seeds: torch.Tensor) -> None:
        self.local_N = torch.full((nodes,), -1, dtype=torch.long)
        self.local_N[seeds] = torch.arange(seeds.numel())
        self.count = seeds.numel()
        self.parts, self.srcs, self.dsts = [seeds], [], []
        self.new, self.drawn = [seeds.numel()], []

    def add(self, neighbour_S: torch.Tensor, target_S: torch.Tensor) -> torch.Tensor:
        """One hop's draws (edges from the drawn neighbour to the node that drew it); the nodes new to the batch."""
        fresh = torch.unique(neighbour_S[self.local_N[neighbour_S] < 0])
        self.local_N[fresh] = torch.arange(self.count, self.count + fresh.numel())
        self.count += fresh.numel()
        self.srcs.append(self.local_N[neighbour_S])
        self.dsts.append(self.local_N[target_S])
        self.parts.append(fresh)
        self.new.append(fresh.numel())
        self.drawn.append(neighbour_S.numel())
        return fresh

    def batch(self) -> Batch:
        edges = (torch.stack([torch.cat(self.srcs), torch.cat(self.dsts)]) if self.srcs
                 else torch.empty(2, 0, dtype=torch.long))
        return Batch(torch.cat(self.parts), edges, tuple(self.new), tuple(self.drawn))


def batch_generator(seed: int, step: int, part: int) -> torch.Generator:
    """The generator of one part's batch at one step: the same in every process that samples it."""
    return torch.Generator().manual_seed(seed * 1_000_003 + step * 1_009 + part)


def draw_seeds(lo: int, hi: int, batch: int, gen: torch.Generator) -> torch.Tensor:
    """``batch`` distinct seed nodes of the part ``[lo, hi)``."""
    if batch > hi - lo:
        raise ValueError(f"batch={batch} seeds exceed the part's {hi - lo} nodes")
    return lo + torch.randperm(hi - lo, generator=gen)[:batch]
