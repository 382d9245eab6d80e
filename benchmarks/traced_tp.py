"""Tensor parallelism of a traced module's Linear pairs and attentions, alone and beside data parallelism and pipeline
stages (tp x pp x dp, unsharded replicas), against the data-parallel and pipeline plans, on 8 H100 (dgx-h100-ib):

1. plait's reference Llama 3 8B module (per layer a SwiGLU MLP, one gated pair, and a grouped-query attention split
   by heads) traced at 2,048 tokens, 64 sequences per step: the planner's best two plans of each tp family beside
   the best plan.
2. A stack of 24 pre-norm MLP blocks (4,096 -> 16,384 -> 4,096, GELU, residual: a transformer without attention, so
   every GEMM but the stem and head is in a pair) on 2,048 tokens, at 4 and at 8 sequences per step: the best plan
   of each family (dp/pp only, tp alone, tp x dp, tp x pp, tp x pp x dp).

Run: python benchmarks/traced_tp.py
Prints each trace's and search's CPU and wall time and the load, the planner's line on tensor parallelism, and
the plans with their rank, step time, breakdown and GiB per GPU.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any

from plait.cost.estimate import Estimate
from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.run.model import Transformer
from plait.sync import ALLREDUCE
from plait.workload.catalog import get_model
from plait.workloads.traced.search import TracedSearch, search_traced
from plait.workloads.traced.tracing import trace_factory

SEQ, GPUS, BATCH = 2048, 8, 64
WIDTH, HIDDEN, BLOCKS = 4096, 16384, 24


def wide_mlp() -> Any:
    """Part 2's model (module docstring): each block ``x + fc2(gelu(fc1(norm(x))))``, fc1 -> fc2 a Megatron pair."""
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm, self.fc1, self.act = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, HIDDEN), nn.GELU()
            self.fc2 = nn.Linear(HIDDEN, WIDTH)

        def forward(self, x: Any) -> Any:
            return x + self.fc2(self.act(self.fc1(self.norm(x))))

    return nn.Sequential(nn.Linear(WIDTH, WIDTH), *(Block() for _ in range(BLOCKS)), nn.Linear(WIDTH, WIDTH))


def kind(est: Estimate) -> str:
    """The plan's family: dp/pp (no tp), tp alone, or tp beside pipeline stages and/or replicas."""
    plan = est.plan
    if plan.tp == 1:
        return "dp/pp"
    beside = [name for name, degree in (("pp", plan.pp), ("dp", plan.dp)) if degree > 1]
    return " x ".join(["tp", *beside]) if beside else "tp alone"


def show(rank: int, est: Estimate) -> None:
    parts = {k: round(v, 4) for k, v in est.time.items() if v}
    print(f"  #{rank} [{kind(est)}] {est.plan.describe()}: {est.step_time_s:.4f} s {parts} "
          f"{est.memory.total_bytes / 2**30:.1f} GiB")


def timed(label: str, work: Any, gpus: int, batch: int) -> TracedSearch:
    cpu, wall = time.process_time(), time.perf_counter()
    found = search_traced(work, get_cluster("dgx-h100-ib"), gpus, batch, (ALLREDUCE,), get_engine("plait"))
    print(f"{label}, {gpus} GPUs, {batch} per step: search {time.process_time() - cpu:.2f} s CPU, "
          f"{time.perf_counter() - wall:.2f} s wall; {found.candidates} candidates, {len(found.ranked)} fit")
    return found


def main() -> None:
    print(f"load {os.getloadavg()[0]:.1f}")
    cpu = time.process_time()
    spec = replace(get_model("llama3-8b"), seq_len=SEQ, tied_embeddings=False)
    work = trace_factory(lambda: Transformer(spec, SEQ), "llama3-8b", (SEQ,), "int64")
    heads = sum(1 for p in work.pairs if p.heads)
    print(f"llama3-8b: {len(work.pairs) - heads} pairs, {heads} attentions; "
          f"trace {time.process_time() - cpu:.1f} s CPU")
    found = timed("llama3-8b", work, GPUS, BATCH)
    print(" ", found.tp_note)
    print(f"  not ranked: {dict(found.reasons)}")
    shown: dict[str, int] = {}
    for rank, est in enumerate(found.ranked, 1):
        if rank == 1 or (est.plan.tp > 1 and shown.get(kind(est), 0) < 2):
            show(rank, est)
            shown[kind(est)] = shown.get(kind(est), 0) + 1
    cpu = time.process_time()
    wide = trace_factory(wide_mlp, "wide-mlp", (SEQ, WIDTH), "float32")
    print(f"wide-mlp: {len(wide.pairs)} pairs, {wide.total_params() / 1e9:.2f} B parameters; "
          f"trace {time.process_time() - cpu:.1f} s CPU")
    for batch in (4, 8):
        found = timed("wide-mlp", wide, GPUS, batch)
        best: dict[str, tuple[int, Estimate]] = {}
        for rank, est in enumerate(found.ranked, 1):
            best.setdefault(kind(est), (rank, est))
        for rank, est in best.values():
            show(rank, est)


if __name__ == "__main__":
    main()
