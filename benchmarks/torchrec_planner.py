"""plait's embedding placement next to TorchRec's planner for three table sets.

Run: python benchmarks/torchrec_planner.py     (needs torchrec and fbgemm-gpu-cpu: the recsys install, README)

For each table set, plait's greedy placement (:mod:`plait.workloads.dlrm.search`) and TorchRec's
``EmbeddingShardingPlanner`` (its enumerator, estimators and greedy partitioner, on a Topology of the same GPUs,
HBM and batch) each place the tables; both placements are costed by plait's model
(:mod:`plait.workloads.dlrm.cost`: slowest rank's embedding time, the step with the dense part, peak memory per rank),
and TorchRec's own estimate of its placement (the slowest rank's sum of shard ``perf.total``, TorchRec's unit) is
printed beside. The table sets are assumed (synthetic), not published datasets:

- ``dlrm-small``: examples/dlrm-small.toml, 8 tables from 1K to 40M rows, 16 A100 80GB (2 nodes);
- ``many-small``: 26 tables of 10^3 .. 10^6 rows (log-spaced), dim 64, pooling 1..5, 8 A100 80GB;
- ``few-huge``: 4 tables of 100M .. 400M rows, dim 128, pooling 1..3, 32 A100 80GB (4 nodes).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def table_sets():  # type: ignore[no-untyped-def]
    from plait.workloads.dlrm.model import DlrmSpec, Table, read_dlrm

    many = tuple(Table(f"s{i}", int(10 ** (3 + 3 * i / 25)), 64, float(1 + i % 5)) for i in range(26))
    huge = tuple(Table(f"h{i}", (i + 1) * 100_000_000, 128, float(1 + i % 3)) for i in range(4))
    return [("dlrm-small", read_dlrm(ROOT / "examples" / "dlrm-small.toml"), 16, 4096),
            ("many-small", DlrmSpec("many-small", 13, (512, 256, 64), (512, 256, 1), many), 8, 4096),
            ("few-huge", DlrmSpec("few-huge", 13, (512, 256, 128), (512, 256, 1), huge), 32, 2048)]


def main() -> int:
    from collections import Counter

    from plait.hardware.catalog import get_cluster
    from plait.workloads.dlrm.cost import estimate_dlrm
    from plait.workloads.dlrm.search import plan_tables
    from plait.workloads.dlrm.torchrec import torchrec_placements

    cluster = get_cluster("dgx-a100-ib")
    print(f"{'table set':12s} {'planner':9s} {'slowest rank ms':>15s} {'step ms':>8s} {'peak GiB':>9s} "
          f"{'TorchRec est.':>13s}  sharding types")
    for name, spec, world, batch in table_sets():
        ours = plan_tables(spec, cluster, world, batch)
        theirs, their_estimate = torchrec_placements(spec, world, cluster.gpus_per_node, batch,
                                                     cluster.accelerator.memory_bytes)
        for label, placement, own in (("plait", ours, ""), ("torchrec", theirs, f"{max(their_estimate):.3f}")):
            est = estimate_dlrm(spec, placement, cluster, world, batch)
            kinds = ", ".join(f"{k} {v}" for k, v in Counter(p.sharding for p in placement).most_common())
            print(f"{name:12s} {label:9s} {1e3 * max(est.rank_time_s):15.3f} {1e3 * est.step_s:8.3f} "
                  f"{est.max_memory_bytes / 2**30:9.2f} {own:>13s}  {kinds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
