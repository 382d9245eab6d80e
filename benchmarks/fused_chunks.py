"""Predicted gain of chunked computation-collectives (``overlap_chunks``; :mod:`plait.cost.chunked`) on a few
plans, and of a DLRM's lookups fused with their all-to-alls (:mod:`plait.workloads.dlrm.fused`).

For each transformer plan: the predicted step at 1, 2, 4, 8 and 16 chunks, the best, and one layer's TP (or EP)
collectives beside its GEMMs (the planner's verdict, :mod:`plait.search.chunks`). For each DLRM placement the same
over sample slices. Predictions only: no engine plait exports to runs chunked collectives, and plait's own runtime
runs them as primitives (``tests/test_chunked_overlap.py``), not inside its blocks. Prints CPU time and the load.

    python benchmarks/fused_chunks.py
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.search.chunks import CHUNKS, chunk_verdict
from plait.workload.catalog import get_model
from plait.workloads import load
from plait.workloads.dlrm.fused import best_chunks, fused_estimate
from plait.workloads.dlrm.predict import parse_placements, predict_dlrm

ROOT = Path(__file__).parents[1]
CASES = (  # (model, cluster, plan, why it is here)
    ("llama3-70b", "dgx-h100-ib", Plan(tp=8, sp=True, pp=4, dp_shard=2, sharding="zero1", global_batch=64),
     "examples/llama3-70b-chunks.toml without the chunks"),
    ("llama3-70b", "dgx-h100-ib", Plan(tp=8, sp=True, pp=4, vpp=5, schedule="interleaved", dp_shard=2,
                                       sharding="zero1", recompute="selective", global_batch=64),
     "examples/llama3-70b-pp.toml"),
    ("llama3-8b", "dgx-h100-ib", Plan(tp=8, sp=True, micro_batch=2, global_batch=64), "tp8 on one node"),
    ("llama3-8b", "dgx-h100-ib", Plan(tp=2, sp=True, dp_shard=4, sharding="zero3", micro_batch=2, global_batch=64),
     "tp2: collectives small beside the GEMMs"),
    ("mixtral-8x7b", "dgx-h100-ib", Plan(ep=8, dp_shard=8, sharding="zero3", micro_batch=1, global_batch=64,
                                         seq_len=4096), "ep8 on one node, no TP"),
    ("mixtral-8x7b", "dgx-h100-ib", Plan(tp=2, sp=True, ep=8, dp_shard=8, sharding="zero3", micro_batch=1,
                                         global_batch=64, seq_len=4096), "tp2 x ep8: the EP group spans 2 nodes"),
)


def _transformer() -> None:
    engine = get_engine()
    print(f"{'model':14s} {'layout':58s} " + " ".join(f"{'c=' + str(c):>8s}" for c in (1, *CHUNKS)) + "  best")
    for name, cluster_name, plan, why in CASES:
        model, cluster = get_model(name), get_cluster(cluster_name)
        steps = [estimate(model, cluster, replace(plan, overlap_chunks=c), engine=engine).step_time_s
                 for c in (1, *CHUNKS)]
        verdict = chunk_verdict(model, cluster, engine, estimate(model, cluster, plan, engine=engine))
        best = f"c={verdict.chunks} {100 * verdict.gain:+.1f}%" if verdict else "-"
        print(f"{name:14s} {plan.describe():58s} " + " ".join(f"{s:8.4f}" for s in steps) + f"  {best}")
        if verdict:
            print(f"{'':14s} ({why}) {1e3 * verdict.comm_s:.3g} ms collectives beside {1e3 * verdict.gemm_s:.3g} ms "
                  "of GEMMs per layer pass")


def _dlrm() -> None:
    spec, cluster = load(str(ROOT / "examples" / "dlrm-small.toml")).description, get_cluster("dgx-h100-ib")
    by_node = ",".join(f"{t.name}=column_wise@" + "+".join(str(8 * i + j) for j in range(8))
                       for i, t in enumerate(spec.tables))
    cases = (("plait's placement, 16 GPUs, 65,536 samples", predict_dlrm(spec, cluster, 16, 65_536)),
             ("plait's placement, 64 GPUs, 1,048,576 samples", predict_dlrm(spec, cluster, 64, 1_048_576)),
             ("a node per table (column-wise x8), 64 GPUs, 1,048,576",
              predict_dlrm(spec, cluster, 64, 1_048_576, placements=parse_placements(by_node, spec, 64))))
    print(f"\n{'dlrm-small':56s} " + " ".join(f"{'c=' + str(c):>8s}" for c in (1, *CHUNKS)) + "  (ms)")
    for label, pred in cases:
        steps = [pred.estimate.step_s] + [fused_estimate(pred, c).step_s for c in CHUNKS]
        print(f"{label:56s} " + " ".join(f"{1e3 * s:8.3f}" for s in steps))
        print(f"{'':4s}{best_chunks(pred).text()}")


def main() -> None:
    load_before, start, cpu = os.getloadavg(), time.perf_counter(), time.process_time()
    _transformer()
    _dlrm()
    print(f"\n{time.process_time() - cpu:.2f} s CPU, {time.perf_counter() - start:.2f} s wall; load average "
          f"{load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
