"""plait's phases of a DGL GPU-sampling step on one V100 beside GNNLab's published breakdown of the same runs.

GNNLab's artifact times its DGL example on one GPU phase by phase (``exp/table5/run.py`` ``dgl_breakdown_test``:
devices ``0``, ``use_gpu_sampling``, ``no_pipelining``, so each phase ends in an ``event_sync``), GCN with fanouts
15-10-5 and GraphSAGE with 10-25, 8,000 seeds a batch, on ogbn-products (PR), twitter-2010 (TW) and
ogbn-papers100M (PA) (its DGL columns print no uk-2006-05 figures), and prints
each epoch's Sample, Extract (the blocks' copy and ``load_subtensor``: the ids to the host, the host gather, the
pageable copy) and Train seconds: https://github.com/SJTU-IPADS/gnnlab/blob/2d0dd92ce4e2efec3d47212ce73358cd03f8d3d8/
exp/table5/README.md, "Output Example", the DGL columns. These are the example script and machine of the
``GNNLAB_T4`` rows of ``plait validate gnn`` (their 8-GPU pipelined epochs); this table is not a validation row.

Per step (the epoch's phase over its batches: ceil(train nodes / 8,000)) this prints the published phase and
plait's: ``sampling`` (DGL's GPU sampler, :mod:`plait.workloads.gnn.dgl_gpu_sampler`), ``fetch`` (the host rows'
gather and pageable copy) and ``compute`` (the training's device work), with the batch's expected nodes.

Run: python benchmarks/gnnlab_dgl_phases.py (a second; no arguments).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import plait
from plait.hardware.catalog import get_cluster
from plait.validate.records import read_records
from plait.workloads.gnn.cost import estimate_gnn
from plait.workloads.gnn.datasets import graphs
from plait.workloads.gnn.loop import GnnLoop
from plait.workloads.gnn.sampler import DGL_GPU
from plait.workloads.gnn.validate import COLUMNS, RAW_DIRECTION_SOURCES, SOURCE_SYSTEMS, _row_spec

PUBLISHED = {("GCN", "ogbn-products"): (0.39, 3.22, 1.30), ("GCN", "twitter-2010"): (0.90, 11.04, 1.64),
             ("GCN", "ogbn-papers100M"): (1.67, 12.73, 4.21), ("GraphSAGE", "ogbn-products"): (0.15, 2.47, 0.24),
             ("GraphSAGE", "twitter-2010"): (0.43, 5.61, 0.49), ("GraphSAGE", "ogbn-papers100M"): (0.64, 7.07, 1.40)}
"""(model, dataset) -> the DGL columns' (Sample, Extract, Train) seconds an epoch (module docstring's URL)."""
SOURCE = "GNNLAB_T4"


def main() -> None:
    rows_csv = Path(plait.__file__).parent / "validate/data/gnn_epochs.csv"
    known, raw = graphs(), graphs(directed=True)
    assert SOURCE in RAW_DIRECTION_SOURCES  # GNNLab samples ogbn-papers100M's raw citations
    cluster = get_cluster(SOURCE_SYSTEMS[SOURCE])
    print(f"{'model':10s}{'dataset':17s}{'steps':>6s}  {'nodes':>6s}   per step, ms: published / plait")
    for row in read_records(rows_csv, "--gnn file", COLUMNS):
        key = (row["model"], row["dataset"])
        if row["source_id"] != SOURCE or row["loader"] != "gpu" or key not in PUBLISHED:
            continue
        spec = replace(_row_spec(row, known, raw), loop=GnnLoop(copy_from="pageable", ranks_per_node=1))
        est = estimate_gnn(spec, cluster, 1, row.count("batch_per_gpu"), "host_features", library="dgl",
                           sampler=DGL_GPU)
        steps = est.steps_per_epoch
        sample, extract, train = (1e3 * s / steps for s in PUBLISHED[key])
        assert est.batch is not None
        print(f"{key[0]:10s}{key[1]:17s}{steps:6d}  {est.batch.nodes / 1e6:5.2f}M   "
              f"sampling {sample:5.1f} / {1e3 * est.sampling_s:5.1f}   "
              f"fetch {extract:5.1f} / {1e3 * est.fetch_s:5.1f}   compute {train:5.1f} / {1e3 * est.compute_s:5.1f}")


if __name__ == "__main__":
    main()
