"""Tensor parallelism of a traced module's Linear pairs against its data-parallel plans: plait's reference Llama 3 8B
module (SwiGLU MLPs: one gated pair per layer) traced at 2,048 tokens, planned on 8 H100 at 64 sequences per step.

Run: python benchmarks/traced_tp.py
Prints the trace's and the search's CPU time (and the load), the planner's line on tensor parallelism, the best
plan and every tp plan with its rank, step time, breakdown and GiB per GPU.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace

from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.run.model import Transformer
from plait.sync import ALLREDUCE
from plait.workload.catalog import get_model
from plait.workloads.traced.search import search_traced
from plait.workloads.traced.tracing import trace_factory

SEQ, GPUS, BATCH = 2048, 8, 64


def main() -> None:
    start = time.process_time()
    spec = replace(get_model("llama3-8b"), seq_len=SEQ, tied_embeddings=False)
    work = trace_factory(lambda: Transformer(spec, SEQ), "llama3-8b", (SEQ,), "int64")
    traced = time.process_time()
    found = search_traced(work, get_cluster("dgx-h100-ib"), GPUS, BATCH, (ALLREDUCE,), get_engine("plait"))
    searched = time.process_time()
    print(f"{len(work.pairs)} pairs; trace {traced - start:.1f} s CPU, search {searched - traced:.2f} s CPU; "
          f"load {os.getloadavg()[0]:.1f}")
    print(found.tp_note)
    print(f"{found.candidates} candidates, {len(found.ranked)} fit; not ranked: {dict(found.reasons)}")
    for rank, est in enumerate(found.ranked, 1):
        if rank == 1 or est.plan.tp > 1:
            parts = {k: round(v, 4) for k, v in est.time.items() if v}
            print(f"#{rank} {est.plan.describe()}: {est.step_time_s:.3f} s {parts} "
                  f"{est.memory.total_bytes / 2**30:.1f} GiB")


if __name__ == "__main__":
    main()
