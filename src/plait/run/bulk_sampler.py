"""Matrix-based bulk neighbour sampling (000-10: Tripathy, Yelick & Buluç, "Distributed Matrix-Based
Sampling for Graph Neural Network Training", MLSys 2024, Sec. 3-4).

``k`` mini-batches are sampled at once. At each hop the drawing nodes of every batch in the bulk become the rows of
a selection matrix ``Q`` (one row per drawing node, a one in its node's column) and the product ``P = Q A`` with the
adjacency ``A`` (CSR) lists each drawing node's neighbours in its row; each row of ``P`` then keeps ``min(f, d)`` of
its entries, those of the smallest random keys (uniform without replacement, as GraphSAGE samples), and the next
``Q`` holds each batch's new nodes. One product, one sort and one gather serve the whole bulk, so a sampler's fixed
costs per hop are paid once per ``k`` batches.

Where ``A`` lives:

- ``replicated``: every rank holds all of ``A`` and multiplies locally (the paper's case where the topology fits on
  one device: sampling without communication);
- ``partitioned``: rank ``r`` holds only the rows of its part (1-D block rows: the paper's 1.5-D algorithm with
  replication ``c = 1``); each hop, every rank sends the ids of its drawing nodes to the ranks holding their rows,
  which multiply their share of ``Q`` by their block of ``A`` and return each row (its length, then its neighbour
  ids): ``P`` lands where ``Q`` lives, and the sampling itself stays local. Each exchange is an all-to-all: counts
  of ids asked (one int64 per peer), the ids, the rows' lengths, their entries (int64 each).

Each batch draws its keys from its own generator, hop by hop in its rows' order, exactly as
:func:`plait.run.sampler.sample` does, and ``P``'s rows keep ``A``'s stored order: a bulk's batches are the batches
that function samples one at a time (tested), whichever way ``A`` is held.

Tensor legend: ``N`` graph nodes, ``R`` drawing rows of the bulk, ``T`` their entries (neighbour slots), ``S``
entries kept.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

from plait.run.counted import Counted
from plait.run.sampler import Batch, Growing, pick

RowsOf = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
"""Drawing node ids -> ``P = Q A``: its row pointers (``R + 1``) and column ids (``T``)."""


def adjacency(rowptr_N1: torch.Tensor, col_E2: torch.Tensor, columns: int) -> torch.Tensor:
    """A block of adjacency rows as a sparse CSR matrix of ``columns`` columns (ones as values)."""
    with warnings.catch_warnings():  # torch marks sparse CSR as beta
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(rowptr_N1, col_E2, torch.ones(col_E2.numel()),
                                       size=(rowptr_N1.numel() - 1, columns))


def product_rows(a: torch.Tensor, rows_R: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``P = Q A`` for the selection matrix ``Q`` of local row ids ``rows_R`` (SpGEMM, torch.sparse)."""
    q = adjacency(torch.arange(rows_R.numel() + 1), rows_R, a.shape[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        p = q @ a
    return p.crow_indices(), p.col_indices()


def replicated_rows(a: torch.Tensor) -> RowsOf:
    """Rows from a whole adjacency held here."""
    return lambda nodes_R: product_rows(a, nodes_R)


def partitioned_rows(a_block: torch.Tensor, lo: int, owner: Callable[[torch.Tensor], torch.Tensor], parts: int,
                     counter: Counted) -> RowsOf:
    """Rows from the ranks that hold them (module docstring); ``a_block`` holds this rank's rows ``lo ..``."""

    def rows_of(nodes_R: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        owner_R = owner(nodes_R)
        by_owner = torch.argsort(owner_R, stable=True)
        send = torch.bincount(owner_R, minlength=parts)
        recv = torch.empty_like(send)
        counter.all_to_all(recv, send)
        asked = torch.empty(int(recv.sum()), dtype=torch.long)
        counter.all_to_all(asked, nodes_R[by_owner], recv.tolist(), send.tolist())
        crow, col = product_rows(a_block, asked - lo)
        got_lengths = torch.empty(nodes_R.numel(), dtype=torch.long)
        counter.all_to_all(got_lengths, crow[1:] - crow[:-1], send.tolist(), recv.tolist())
        got_cols = torch.empty(int(got_lengths.sum()), dtype=torch.long)
        counter.all_to_all(got_cols, col, _per_peer(torch.cumsum(got_lengths, 0), send),
                           _per_peer(crow[1:], recv))
        # back to the order the rows were asked in
        lengths_R = torch.empty_like(got_lengths)
        lengths_R[by_owner] = got_lengths
        start_sorted = torch.cumsum(got_lengths, 0) - got_lengths
        crow_R = torch.zeros(nodes_R.numel() + 1, dtype=torch.long)
        crow_R[1:] = torch.cumsum(lengths_R, 0)
        start_R = torch.empty_like(start_sorted)
        start_R[by_owner] = start_sorted
        slot_T = torch.repeat_interleave(start_R - crow_R[:-1], lengths_R) + torch.arange(int(crow_R[-1]))
        return crow_R, got_cols[slot_T]

    return rows_of


def _per_peer(cumulative: torch.Tensor, rows: torch.Tensor) -> list[int]:
    """Entries per peer of consecutive row groups (``rows[p]`` rows each) of a cumulative entry count."""
    ends = torch.cumsum(rows, 0)
    totals = torch.cat([torch.zeros(1, dtype=torch.long), cumulative])[ends]
    return torch.diff(totals, prepend=torch.zeros(1, dtype=torch.long)).tolist()


def sample_bulk(rows_of: RowsOf, nodes: int, seeds: list[torch.Tensor], fanouts: tuple[int, ...],
                gens: list[torch.Generator]) -> list[Batch]:
    """The batches of ``seeds[b]`` (each distinct), batch ``b`` drawing with ``gens[b]`` (module docstring)."""
    growing = [Growing(nodes, s) for s in seeds]
    frontiers = list(seeds)
    for fanout in fanouts:
        nodes_R = torch.cat(frontiers)
        crow_R1, col_T = rows_of(nodes_R)
        first_R, deg_R = crow_R1[:-1], crow_R1[1:] - crow_R1[:-1]
        row_bounds = torch.cumsum(torch.tensor([0, *(f.numel() for f in frontiers)]), 0)
        slots = crow_R1[row_bounds].tolist()
        keys_T = torch.cat([torch.rand(slots[b + 1] - slots[b], generator=g, dtype=torch.float64)
                            for b, g in enumerate(gens)])
        row_S, place_S = pick(deg_R, first_R, fanout, keys_T)  # the whole bulk in one sort
        neighbour_S, target_S = col_T[first_R[row_S] + place_S], nodes_R[row_S]
        bounds = torch.searchsorted(row_S, row_bounds).tolist()
        frontiers = [g.add(neighbour_S[bounds[b]:bounds[b + 1]], target_S[bounds[b]:bounds[b + 1]])
                     for b, g in enumerate(growing)]
    return [g.batch() for g in growing]
