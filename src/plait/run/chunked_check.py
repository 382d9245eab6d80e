"""One rank of the chunked computation-collectives check (:mod:`plait.run.chunked`): every primitive run whole and in
``--chunks`` chunks on gloo ranks, each against a reference this rank computes alone from the same seeded tensors,
with the collectives' messages and bytes; one JSON line per rank on standard output (``CHUNKED {...}``).

Start it as ``torchrun --nproc-per-node 2 -m plait.run.chunked_check --chunks 4`` (or ``tests/ranks.py``). Shapes:
``--tokens`` rows of the group and ``--hidden`` columns (a transformer layer's hidden states), ``--top-k`` rows
per token through the experts, ``--batch`` samples per rank through a DLRM's tables (``--tables``, placed table-wise:
rank ``r`` holds tables ``r, r + g, ...``); with ``--plan``, that plan trained whole and chunked inside the model
(:mod:`plait.run.chunked_tp_check`). Legend: ``M`` rows of the group, ``m`` of one rank, ``K``/``N`` inner and
output columns, ``g`` ranks, ``B`` samples per rank.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from plait.run.chunked import (
    Sent,
    all_gather_matmul,
    expert_all_to_all,
    lookup_all_to_all,
    matmul_all_reduce,
    matmul_reduce_scatter,
)
from plait.run.chunked_tp_check import train_both

Run = Callable[[Sent, int], torch.Tensor]
"""A primitive bound to its operands: (the rank's ledger, chunks) -> its result."""


def _tp(g: int, r: int, tokens: int, hidden: int, chunks: int) -> dict[str, object]:
    """The three TP primitives (``hidden``-wide rows, a ``hidden x hidden`` weight sharded over the ranks)."""
    gen = torch.Generator().manual_seed(0)
    x_MK = torch.randn(tokens, hidden, generator=gen)
    w_KN = torch.randn(hidden, g * hidden, generator=gen) / hidden**0.5  # column shards: rank r's N = hidden
    v_KN = torch.randn(g * hidden, hidden, generator=gen) / hidden**0.5  # row shards: rank r's K = hidden
    m, cols = tokens // g, slice(r * hidden, (r + 1) * hidden)
    out: dict[str, object] = {}
    cases = {
        "all_gather_matmul": (lambda s, c: all_gather_matmul(x_MK[r * m:(r + 1) * m], w_KN[:, cols], c, s),
                              x_MK @ w_KN[:, cols]),
        "matmul_reduce_scatter": (lambda s, c: matmul_reduce_scatter(_partial(x_MK, w_KN, cols), v_KN[cols], c, s),
                                  ((x_MK @ w_KN) @ v_KN)[r * m:(r + 1) * m]),
        "matmul_all_reduce": (lambda s, c: matmul_all_reduce(_partial(x_MK, w_KN, cols), v_KN[cols], c, s),
                              (x_MK @ w_KN) @ v_KN),
    }
    for name, (run, want) in cases.items():
        out[name] = _measure(run, want, chunks)
    return out


def _partial(x_MK: torch.Tensor, w_KN: torch.Tensor, cols: slice) -> torch.Tensor:
    """This rank's column-parallel output, the input of the row-parallel GEMM."""
    return x_MK @ w_KN[:, cols]


def _experts(g: int, r: int, tokens: int, top_k: int, hidden: int, chunks: int) -> dict[str, object]:
    """Every rank routes ``tokens * top_k / g`` rows to each rank's expert (``g`` experts, one per rank)."""
    gen = torch.Generator().manual_seed(1)
    m = tokens * top_k // g
    x_all = torch.randn(g, g, m, hidden, generator=gen)  # [sender, expert rank, row, K]
    w_gKN = torch.randn(g, hidden, hidden, generator=gen) / hidden**0.5
    want = torch.stack([x_all[r, e] @ w_gKN[e] for e in range(g)])
    return {"expert_all_to_all": _measure(lambda s, c: expert_all_to_all(x_all[r], w_gKN[r], c, s), want, chunks)}


def _dlrm(g: int, r: int, batch: int, chunks: int, shapes: str) -> dict[str, object]:
    """Tables of ``shapes`` (``ROWSxDIMxPOOLING,...``) placed table-wise, rank ``r`` holding tables ``r, r + g,
    ...``; ids of all ``g * batch`` samples seeded alike on every rank."""
    tables = [_Table(*(int(v) for v in shape.split("x"))) for shape in shapes.split(",")]
    gen = torch.Generator().manual_seed(2)
    bags = [nn.EmbeddingBag(t.rows, t.dim, mode="sum") for t in tables]
    for bag in bags:
        with torch.no_grad():
            bag.weight.copy_(torch.randn(bag.weight.shape, generator=gen))
    ids = [torch.randint(0, t.rows, (g * batch, t.pooling), generator=gen) for t in tables]
    mine = range(r, len(tables), g)
    want = torch.stack([torch.cat([bags[t](ids[t][r * batch:(r + 1) * batch]) for t in range(q, len(tables), g)], 1)
                        for q in range(g)])
    run = (lambda s, c: lookup_all_to_all([bags[t] for t in mine], [ids[t] for t in mine], c, s))
    return {"lookup_all_to_all": _measure(run, want, chunks)}


@dataclass(frozen=True)
class _Table:
    rows: int
    dim: int
    pooling: int
    """Ids per sample (a whole number: every sample carries that many)."""


def _measure(run: Run, want: torch.Tensor, chunks: int) -> dict[str, object]:
    """``run`` whole and in ``chunks``: max difference to ``want``, messages, bytes, wall and CPU time of each."""
    out: dict[str, object] = {}
    for label, c in (("whole", 1), ("chunked", chunks)):
        sent = Sent()
        dist.barrier()
        start, cpu = time.perf_counter(), time.process_time()
        with torch.no_grad():
            got = run(sent, c)
        out[label] = {"max_diff": float((got - want).abs().max()), "messages": sent.messages,
                      "buffer_bytes": sent.buffer_bytes, "to_others_bytes": sent.to_others_bytes,
                      "wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tables", default="64x8x1,32x8x2,16x8x3,40x8x2",
                        help="ROWSxDIMxPOOLING per table (default: examples/dlrm-tiny.toml's)")
    parser.add_argument("--plan", type=Path, action="append", default=[],
                        help="also train this plan whole and in --chunks chunks (plait.run.chunked_tp_check); "
                             "repeatable")
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps of --plan")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    g, r = dist.get_world_size(), dist.get_rank()
    result: dict[str, object] = {"rank": r, "chunks": args.chunks}
    result.update(_tp(g, r, args.tokens, args.hidden, args.chunks))
    result.update(_experts(g, r, args.tokens, args.top_k, args.hidden, args.chunks))
    result.update(_dlrm(g, r, args.batch, args.chunks, args.tables))
    for plan in args.plan:
        cpu = time.process_time()
        result[plan.name] = {**train_both(plan, args.chunks, args.steps), "cpu_s": time.process_time() - cpu}
    print("CHUNKED " + json.dumps(result), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
