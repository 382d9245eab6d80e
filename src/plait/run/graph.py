"""Graphs plait generates for GNN runs (no downloads): a degree-corrected stochastic block model with
power-law expected degrees (Karrer & Newman, Phys. Rev. E 83, 016107, 2011, Sec. II), its blocks being the parts
the ranks own, and node features and labels from a seeded generator.

Edges: ``M`` endpoint pairs are drawn; the first end ``u`` with probability proportional to its weight
``theta_u``; the second, with probability ``1 - mix`` inside ``u``'s block and otherwise in another block chosen
uniformly, proportional to weight within the block. Weights are Chung-Lu's power law ``theta_i ~ (i + i0)^(-1/(a-1))``
(Chung & Lu, Annals of Combinatorics 6, 2002: expected degrees ``~ theta``, a degree tail of exponent ``a``).
Self loops and repeated pairs are dropped and every edge is stored both ways (an undirected graph, as PyG's
``to_undirected`` makes it). Node ``i`` lives in block ``i * parts // nodes`` (contiguous ranges, so a rank's part
is a slice). Labels come from a fixed random linear map of the features (learnable, so losses fall).

Tensor legend: ``N`` nodes, ``F`` features, ``E2`` directed edges (twice the undirected ones).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Graph:
    """A generated graph in CSR form with its features, labels and parts."""

    rowptr_N1: torch.Tensor
    col_E2: torch.Tensor
    x_NF: torch.Tensor
    y_N: torch.Tensor
    parts: int

    @property
    def nodes(self) -> int:
        return int(self.rowptr_N1.numel() - 1)

    @property
    def edges(self) -> int:
        """Undirected edges."""
        return int(self.col_E2.numel() // 2)

    def degrees(self) -> torch.Tensor:
        return self.rowptr_N1[1:] - self.rowptr_N1[:-1]

    def owner(self, nodes: torch.Tensor) -> torch.Tensor:
        """The part (rank) that holds each node's features."""
        return nodes * self.parts // self.nodes

    def part_range(self, part: int) -> tuple[int, int]:
        """Nodes ``[start, stop)`` of ``part``."""
        return -(-part * self.nodes // self.parts), -(-(part + 1) * self.nodes // self.parts)

    def edge_cut(self) -> float:
        """Fraction of edges whose ends lie in different parts."""
        src = torch.repeat_interleave(torch.arange(self.nodes), self.degrees())
        return float((self.owner(src) != self.owner(self.col_E2)).float().mean())


def generate(nodes: int, edges: int, parts: int, features: int, classes: int, exponent: float = 2.5,
             mix: float = 0.1, seed: int = 0) -> Graph:
    """A degree-corrected SBM (module docstring) with about ``edges`` undirected edges."""
    gen = torch.Generator().manual_seed(seed)
    theta = (torch.arange(nodes, dtype=torch.float64) + 10.0) ** (-1.0 / (exponent - 1.0))
    theta = theta[torch.randperm(nodes, generator=gen)]  # hubs spread over the parts
    block = torch.arange(nodes) * parts // nodes
    u = torch.multinomial(theta, edges, replacement=True, generator=gen)
    other = torch.rand(edges, generator=gen, dtype=torch.float64) < mix
    target_block = block[u].clone()
    if parts > 1:
        shift = torch.randint(1, parts, (edges,), generator=gen)
        target_block = torch.where(other, (target_block + shift) % parts, target_block)
    v = torch.empty_like(u)
    for b in range(parts):  # proportional to weight inside each target block
        lo, hi = -(-b * nodes // parts), -(-(b + 1) * nodes // parts)
        chosen = (target_block == b).nonzero().flatten()
        v[chosen] = lo + torch.multinomial(theta[lo:hi], chosen.numel(), replacement=True, generator=gen)
    keep = u != v
    # distinct (low, high) pairs in lexicographic order, as torch.unique(pairs, dim=1) gives them: the unique of one
    # key low * nodes + high (high < nodes) is the same set in the same order, ~70x faster on 500k edges on a CPU
    # (measured by timing both on SAMPLER_GRAPH's edges, 1.9 s against 0.025 s; unique_dim sorts columns)
    key = torch.unique(torch.minimum(u, v)[keep] * nodes + torch.maximum(u, v)[keep])
    pairs = torch.stack([key // nodes, key % nodes])
    src = torch.cat([pairs[0], pairs[1]])
    dst = torch.cat([pairs[1], pairs[0]])
    order = torch.argsort(src * nodes + dst)
    src, dst = src[order], dst[order]
    rowptr = torch.zeros(nodes + 1, dtype=torch.long)
    rowptr[1:] = torch.cumsum(torch.bincount(src, minlength=nodes), 0)
    x = torch.randn(nodes, features, generator=gen)
    teacher = torch.randn(features, classes, generator=gen)
    return Graph(rowptr, dst, x, (x @ teacher).argmax(dim=1), parts)
