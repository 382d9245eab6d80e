"""Predicted vs measured epoch times of GNN training: public tables of the DGL 0.5 benchmark, GNNLab,
SALIENT, SALIENT++ and Quiver (``plait/validate/data/gnn_epochs.csv``; sources and caveats in ``plait/validate/data/gnn_epochs.md``),
each costed by :mod:`plait.workloads.gnn.cost` on the preset of its GPU with the graph's statistics
(``plait/workloads/gnn/data/graphs.toml``) and, where measured, its degree histogram
(``plait/workloads/gnn/data/degree_histograms.toml``).

A row's job: its dataset, model (GraphSAGE, GCN, GAT with its heads and hidden width per head, or GIN), layers,
hidden width, fanouts and its loader (the ``loader``, ``workers``, ``features_on`` and ``feature_bytes`` columns):
full-graph rows on one GPU; GPU-sampling rows with every part of the step in turn (features in host memory read over
PCIe, or on the GPU); host-CPU loaders as :mod:`plait.workloads.gnn.host` composes them with the trainer. Each row's
graph is stored as its system stores it (:data:`RAW_DIRECTION_SOURCES`: GNNLab keeps ogbn-papers100M's citations
directed). The error
is on the epoch time (predicted over measured, minus one). Rows plait cannot predict say why (SALIENT++'s
partitioned features).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import replace
from importlib import resources
from pathlib import Path

from plait.cost.compute import memory_bytes_per_s
from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.hardware.cluster import Cluster
from plait.validate.classic import ClassicResult
from plait.validate.progress import Progress, each
from plait.validate.records import Record, positive, read_records
from plait.workloads.gnn.compute import GnnEstimate, input_cast_s
from plait.workloads.gnn.cost import estimate_gnn
from plait.workloads.gnn.dgl_reverse import rebuild_bytes, reversals
from plait.workloads.gnn.factored import factored_epoch
from plait.workloads.gnn.host import host_step, loaders, per_core_rate, usable_workers
from plait.workloads.gnn.model import GnnModel, GnnSpec, GraphStats, check_gnn
from plait.workloads.gnn.staging import loop_threads, pageable_extra_s

SYSTEMS = {"V100-16GB": "dgx1-v100", "V100-32GB": "dgx1-v100", "A10G-24GB": "aws-g5-8xlarge",
           "RTX3090-24GB": "rtx3090-workstation"}
"""GPU names of the CSV -> a preset of that GPU and its host: the V100 rows run on one 8-GPU node, SALIENT++'s A10G
rows on g5.8xlarge instances (1 GPU each, as its README names them), Quiver's on one RTX 3090."""
SHARED_NODE_SYSTEMS = {"A10G-24GB": "aws-g5-24xlarge"}
"""The same for rows with several GPUs per node: SALIENT's g5.24xlarge instances (2 GPUs used per instance)."""
SOURCE_SYSTEMS = {"GNNLAB_T4": "gnnlab-v100x8"}
"""Sources that state their machine: GNNLab's README names its 8-GPU V100 server and its host CPUs."""
KINDS = {"GraphSAGE": "sage", "GCN": "gcn", "GAT": "gat", "GIN": "gin"}
HIDDEN_DROPOUT = {"GraphSAGE": True, "GCN": True, "GAT": True, "GIN": False}
"""Whether the rows' scripts drop out every hidden layer's output (:attr:`GnnModel.dropout`): the DGL 0.5 benchmark's
``main_{dgl,pyg}_*.py`` (``self.dropout(x)`` after the hidden layers' ReLU, or ``feat_drop`` on each layer's input),
SALIENT's ``driver/models.py`` SAGE and GAT (``F.dropout`` after each hidden ``relu``), GNNLab's ``example/{dgl,pyg,
samgraph}/multi_gpu/train_{gcn,graphsage}.py`` and Quiver's ``examples/dgl/ogbn_products_sage_quiver.py``
(``self.dropout(h)`` after each hidden activation); SALIENT's GIN drops out only its output MLP's hidden layer."""
ASSUMED_EXPONENT = 2.1
"""Assumed degree-law exponent where a dataset states none (graphs.toml)."""


RAW_DIRECTION_SOURCES = {
    "GNNLAB_T4": "https://github.com/SJTU-IPADS/gnnlab/blob/2d0dd92ce4e2efec3d47212ce73358cd03f8d3d8/"
                 "datagen/papers100M.py (convert_data: the CSC of the raw edges, no inverse edges; meta NUM_EDGE "
                 "1,615,685,872), while datagen/products.py doubles products' edges"}
"""Sources whose systems sample a directed graph (``raw_out_degree_exponent`` in graphs.toml) in its raw direction,
each node its in-edges, instead of the symmetrized graph (SALIENT's ``driver/dataset.py``: ``to_symmetric``)."""


def _data(name: str) -> dict:
    return tomllib.loads(resources.files("plait.workloads.gnn").joinpath(f"data/{name}").read_text())


def graphs(directed: bool = False) -> dict[str, GraphStats]:
    """The datasets of graphs.toml, symmetrized, with the measured degree histograms of degree_histograms.toml where
    there is one; ``directed``: those with raw directed edges in their direction (the power laws: no histogram gives
    in- and out-degrees apart)."""
    measured = _data("degree_histograms.toml")
    out = {}
    for name, g in _data("graphs.toml").items():
        raw = directed and "raw_out_degree_exponent" in g
        mean = (1 if raw else 2) * g["edges"] / g["nodes"]
        hist = () if raw or name not in measured else tuple(zip(measured[name]["degrees"], measured[name]["nodes"],
                                                                 strict=True))
        out[name] = GraphStats(nodes=g["nodes"], edges=g["edges"], features=g["features"], classes=g["classes"],
                               train_nodes=g["train_nodes"], degree_exponent=g.get("degree_exponent", ASSUMED_EXPONENT),
                               max_degree=math.ceil(hist[-1][0]) if hist else min(g["nodes"] - 1, round(100 * mean)),
                               out_degree_exponent=g["raw_out_degree_exponent"] if raw else 0.0,
                               degree_histogram=hist)
    return out


COLUMNS = ("source_id", "system", "dataset", "model", "layers", "hidden", "fanouts", "batch_per_gpu", "gpu", "gpus",
           "nodes", "measured_epoch_s", "loader", "workers", "features_on", "feature_bytes", "sampler_gpus",
           "cache_fraction")
"""The columns a row's prediction reads (``heads``, ``norm`` and ``graph_formats`` may follow;
``plait/validate/data/gnn_epochs.md`` describes them all)."""
GRAPH_FORMATS = {"": "coo", "csr,csc": "csr,csc"}
"""The ``graph_formats`` column of a DGL full-graph row: empty where the script's graph holds the COO it was built
from, ``csr,csc`` where the script keeps only those (``g.formats(['csr', 'csc'])``), so its CSR is there for the
backward's reversed graph (:mod:`plait.workloads.gnn.dgl_reverse`)."""
NORMS = {"": False, "batch": True}
"""The ``norm`` column: empty, or ``batch`` where the row's script runs a ``BatchNorm1d`` on every hidden layer's
output before its activation (:attr:`GnnModel.batch_norm`)."""
MAX_LAYERS = 1000
"""Deepest GNN a row may describe: the 1,000 layers of RevGNN (Li et al., "Training Graph Neural Networks with 1000
Layers", ICML 2021), the deepest published; a bound on the work one row asks for (a layer is costed at a time)."""


def predict_row(row: Record, known: dict[str, GraphStats],
                raw: dict[str, GraphStats] | None = None) -> ClassicResult:
    """One row's prediction; ``raw``: the graphs in their raw direction, for :data:`RAW_DIRECTION_SOURCES`."""
    label = f"{row['system']} {row['dataset']} {row['model']} x{row['gpus']} GPUs"
    measured = 1.0 / row.number("measured_epoch_s")  # epoch times as rates: the error is on the epoch time
    result = lambda why: ClassicResult(row["source_id"], label, measured, None, why)
    loader = row["loader"]
    if loader.startswith("salient++"):
        return result("SALIENT++'s partitioned features fetched from other machines are not modelled")
    if loader not in ("full-graph", "gpu", "gnnlab-factored") and loader not in loaders():
        return result(f"loader {loader!r} is not modelled ({', '.join(loaders())} are)")
    if row["model"] not in KINDS:
        return result(f"{row['model']} layers are not modelled ({', '.join(KINDS)} are)")
    gpus, nodes = row.count("gpus"), row.count("nodes")
    system = SOURCE_SYSTEMS.get(row["source_id"]) or (
        SHARED_NODE_SYSTEMS if gpus > nodes and row["gpu"] in SHARED_NODE_SYSTEMS else SYSTEMS).get(row["gpu"])
    if system is None:
        return result(f"no preset system of {row['gpu']} GPUs")
    if row["dataset"] not in known:
        return result(f"no statistics of {row['dataset']}")
    layers, heads = row.count("layers", high=MAX_LAYERS), row.count("heads", default=1)
    if row.get("norm") not in NORMS:
        raise ConfigError(f"{row.where}: column norm={row.get('norm')!r} must be empty or 'batch'")
    full = loader == "full-graph"
    fanouts = (1,) * layers if full else row.counts("fanouts", "-")
    graphs_used = raw if raw is not None and row["source_id"] in RAW_DIRECTION_SOURCES else known
    spec = GnnSpec(name=row["dataset"], graph=graphs_used[row["dataset"]],
                   model=GnnModel(kind=KINDS[row["model"]], layers=layers, hidden=row.count("hidden") * heads,  # type: ignore[arg-type]
                                  fanouts=fanouts, heads=heads, dropout=HIDDEN_DROPOUT[row["model"]],
                                  batch_norm=NORMS[row.get("norm")]))
    check_gnn(spec, row.where)
    cluster = get_cluster(system)
    library = "dgl" if row["system"].startswith("DGL") else "pyg"
    if full:  # the DGL 0.5 benchmark's own SAGEConv modules aggregate the inputs in one fused product (compute.py)
        library = ("pyg_sparse" if library == "pyg" else "spmm") if spec.model.kind == "sage" else library
        est = estimate_gnn(spec, cluster, 1, 1, "full_graph", library=library)  # type: ignore[arg-type]
        if library in ("dgl", "spmm"):  # DGL's backward reverses the graph (dgl_reverse.py)
            est = replace(est, compute_s=est.compute_s + _dgl_reversals_s(row, spec, cluster))
        return ClassicResult(row["source_id"], label, measured, 1.0 / est.epoch_s)
    batch = row.count("batch_per_gpu")
    if loader == "gnnlab-factored":  # sampler and trainer GPUs apart (factored.py)
        fgnn = factored_epoch(spec, cluster, row.count("sampler_gpus", high=gpus), batch,
                              positive(row["cache_fraction"], "cache_fraction", row.where, False, 1.0) or 0.0,
                              row.count("feature_bytes", high=8))
        return ClassicResult(row["source_id"], label, measured, 1.0 / fgnn.epoch_s)
    on_gpu = row["features_on"] == "gpu"
    per_node = -(-gpus // nodes)
    if loader == "gpu":  # sampled on the GPU in the training loop: every part in turn
        est = estimate_gnn(spec, cluster, gpus, batch, "replicated" if on_gpu else "host_features", library="dgl")
        if not on_gpu:  # DGL's loop: feat[ids] (a new tensor) .to(device) from pageable memory (staging.py)
            est = replace(est, fetch_s=est.fetch_s + pageable_extra_s(est.fetch_bytes, cluster,
                                                                      loop_threads(cluster, per_node)))
        return ClassicResult(row["source_id"], label, measured, 1.0 / est.epoch_s)
    host, feature_bytes = loaders()[loader], row.count("feature_bytes", high=8)
    est = estimate_gnn(spec, cluster, gpus, batch, "replicated", library=host.library)
    trainer_s = max(est.compute_s + est.all_reduce_s + est.optimizer_s + _rows_on_gpu_s(est, spec, cluster, on_gpu,
                                                                                      feature_bytes), est.host_s)
    workers = usable_workers(row.count("workers"), cluster, per_node)
    step = host_step(est.batch, host, per_core_rate(host, known), workers, cluster,  # type: ignore[arg-type]
                     spec.graph.features, feature_bytes, trainer_s, loop_threads(cluster, per_node, workers))
    if on_gpu:
        step = replace(step, slicing_s=0.0, transfer_s=0.0)
    return ClassicResult(row["source_id"], label, measured, 1.0 / step.epoch_s(est.steps_per_epoch))


def _dgl_reversals_s(row: Record, spec: GnnSpec, cluster: Cluster) -> float:
    """Seconds a DGL full-graph step's backward spends rebuilding its reversed graph's CSC, where the script's graph
    holds its COO (:data:`GRAPH_FORMATS`; :mod:`plait.workloads.gnn.dgl_reverse`); DGL's own SAGEConv modules
    aggregate the raw inputs at the first layer, which takes no gradient."""
    formats = row.get("graph_formats")
    if formats not in GRAPH_FORMATS:
        raise ConfigError(f"{row.where}: column graph_formats={formats!r} must be empty or 'csr,csc'")
    if GRAPH_FORMATS[formats] != "coo":
        return 0.0
    kind, g = spec.model.kind, spec.graph
    count = reversals(kind, spec.model.layers, kind != "sage")
    return count * rebuild_bytes(g.nodes, g.stored_edges) / memory_bytes_per_s(cluster.accelerator)


def _rows_on_gpu_s(est: GnnEstimate, spec: GnnSpec, cluster: Cluster, on_gpu: bool, feature_bytes: int) -> float:
    """What a host loader's trainer does on the GPU with the batch's input rows: gathers them from the table it holds
    (``features_on = gpu``: ``nfeat[input_nodes]`` on the GPU, the estimate's ``fetch_s``), or, with rows the loop or
    the loader sliced on the host (they arrive gathered), only casts rows stored below fp32 (SALIENT's fp16 rows:
    ``x = x.to(torch.float)`` opens the SAGE, GAT and GIN ``forward`` of its ``driver/models.py``)."""
    if on_gpu:
        return est.fetch_s
    return input_cast_s(est.batch.nodes, spec.graph.features, feature_bytes, cluster.accelerator)  # type: ignore[union-attr]


def validate_gnn(path: Path, progress: Progress | None = None) -> list[ClassicResult]:
    """Every row of ``path`` (the schema of ``plait/validate/data/gnn_epochs.csv``)."""
    known, raw = graphs(), graphs(directed=True)
    return each(read_records(path, "--gnn file", COLUMNS), lambda row: predict_row(row, known, raw), progress)
