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

from dataclasses import replace
from pathlib import Path

from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.hardware.cluster import Cluster
from plait.hardware.server import gpu_server, server_problem
from plait.validate.classic import ClassicResult
from plait.validate.progress import Progress, each
from plait.validate.records import Record, plain, positive, read_records
from plait.workloads.gnn.batch_norm import BatchNormKernels, release_kernels
from plait.workloads.gnn.cost import estimate_gnn
from plait.workloads.gnn.datasets import graphs
from plait.workloads.gnn.factored import factored_epoch
from plait.workloads.gnn.host import loaders
from plait.workloads.gnn.loop import GnnLoop, GraphFormats
from plait.workloads.gnn.model import GnnModel, GnnSpec, GraphStats, check_gnn
from plait.workloads.gnn.sampler import DGL_GPU

SYSTEMS = {"V100-16GB": "dgx1-v100", "V100-32GB": "dgx1-v100", "A10G-24GB": "aws-g5-8xlarge",
           "RTX3090-24GB": "rtx3090-workstation"}
"""GPU names of the CSV -> a preset of that GPU and its host: the V100 rows run on one 8-GPU node, SALIENT++'s A10G
rows on g5.8xlarge instances (1 GPU each, as its README names them), Quiver's on one RTX 3090; a GPU not here, on
one machine, runs on a generic server of it (:mod:`plait.hardware.server`)."""
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
RAW_DIRECTION_SOURCES = {
    "GNNLAB_T4": "https://github.com/SJTU-IPADS/gnnlab/blob/2d0dd92ce4e2efec3d47212ce73358cd03f8d3d8/"
                 "datagen/papers100M.py (convert_data: the CSC of the raw edges, no inverse edges; meta NUM_EDGE "
                 "1,615,685,872), while datagen/products.py doubles products' edges"}
"""Sources whose systems sample a directed graph (``raw_out_degree_exponent`` in graphs.toml) in its raw direction,
each node its in-edges, instead of the symmetrized graph (SALIENT's ``driver/dataset.py``: ``to_symmetric``)."""


COLUMNS = ("source_id", "system", "dataset", "model", "layers", "hidden", "fanouts", "batch_per_gpu", "gpu", "gpus",
           "nodes", "measured_epoch_s", "loader", "workers", "features_on", "feature_bytes", "sampler_gpus",
           "cache_fraction")
"""The columns a row's prediction reads (``heads``, ``norm`` and ``graph_formats`` may follow;
``plait/validate/data/gnn_epochs.md`` describes them all)."""
GRAPH_FORMATS: dict[str, GraphFormats] = {"": "coo", "csr,csc": "csr,csc"}
"""The ``graph_formats`` column of a DGL full-graph row: empty where the script's graph holds the COO it was built
from, ``csr,csc`` where the script keeps only those (``g.formats(['csr', 'csc'])``), so its CSR is there for the
backward's reversed graph (:mod:`plait.workloads.gnn.dgl_reverse`)."""
NORMS = {"": False, "batch": True}
"""The ``norm`` column: empty, or ``batch`` where the row's script runs a ``BatchNorm1d`` on every hidden layer's
output before its activation (:attr:`GnnModel.batch_norm`)."""
SOURCE_TORCH = {"DGL05_BENCH": "1.8.1"}
"""The PyTorch release of the sources that state it: the DGL 0.5 benchmark's README ("DGL v0.6.1, PyG v1.7.0,
PyTorch 1.8.1, CUDA 11.1"; its rows' notes quote it); the others' is not stated."""
MAX_LAYERS = 1000
"""Deepest GNN a row may describe: the 1,000 layers of RevGNN (Li et al., "Training Graph Neural Networks with 1000
Layers", ICML 2021), the deepest published; a bound on the work one row asks for (a layer is costed at a time)."""


def predict_row(row: Record, known: dict[str, GraphStats],
                raw: dict[str, GraphStats] | None = None) -> ClassicResult:
    """One row's prediction: its columns mapped to a job (graph, model and the :class:`GnnLoop` of its script: graph
    formats, copy, loader, workers, feature bytes, ranks per node), priced by the same
    :func:`plait.workloads.gnn.cost.estimate_gnn` as ``plait estimate``; ``raw``: the graphs in their raw direction,
    for :data:`RAW_DIRECTION_SOURCES`. A loader's reference rate reads the known datasets' statistics
    (:func:`plait.workloads.gnn.datasets.known_graphs`), not ``known``."""
    generic = "" if _row_system(row) is not None else f" on {row['gpu']} (generic server)"
    label = f"{row['system']} {row['dataset']} {row['model']} x{row['gpus']} GPUs{generic}"
    measured = 1.0 / row.number("measured_epoch_s")  # epoch times as rates: the error is on the epoch time
    why = _unmodelled(row, known)
    if why is not None:
        return ClassicResult(row["source_id"], label, measured, None, why)
    spec = _row_spec(row, known, raw)
    return ClassicResult(row["source_id"], label, measured, 1.0 / _epoch_s(row, spec, _row_cluster(row)))


def _row_system(row: Record) -> str | None:
    """The preset system of the row's GPUs (its source's own where it names one), or None."""
    gpus, nodes = row.count("gpus"), row.count("nodes")
    return SOURCE_SYSTEMS.get(row["source_id"]) or (
        SHARED_NODE_SYSTEMS if gpus > nodes and row["gpu"] in SHARED_NODE_SYSTEMS else SYSTEMS).get(row["gpu"])


def _row_cluster(row: Record) -> Cluster:
    """The cluster of the row: its preset system (:func:`_row_system`), else a generic server of its GPU
    (:mod:`plait.hardware.server`; ``_unmodelled`` refused rows neither describes)."""
    system = _row_system(row)
    return get_cluster(system) if system is not None else gpu_server(row["gpu"], row.count("gpus"))


def _server_problem(row: Record) -> str | None:
    """Why a row without a preset system has no generic server either (one spanning machines has none)."""
    if row.count("nodes") > 1:
        return f"no preset system of {row['gpu']} GPUs, and the row's {row['nodes']} machines are not described"
    return server_problem(row["gpu"], row.count("gpus"))


def _unmodelled(row: Record, known: dict[str, GraphStats]) -> str | None:
    """Why the row is not predicted (its loader, layers, GPUs or dataset are not modelled), or None."""
    loader = row["loader"]
    if loader.startswith("salient++"):
        return "SALIENT++'s partitioned features fetched from other machines are not modelled"
    if loader not in ("full-graph", "gpu", "gnnlab-factored") and loader not in loaders():
        return f"loader {loader!r} is not modelled ({', '.join(loaders())} are)"
    if row["model"] not in KINDS:
        return f"{row['model']} layers are not modelled ({', '.join(KINDS)} are)"
    if _row_system(row) is None and (problem := _server_problem(row)):
        return problem
    if row["dataset"] not in known:
        return f"no statistics of {row['dataset']}"
    return None


def _row_spec(row: Record, known: dict[str, GraphStats], raw: dict[str, GraphStats] | None) -> GnnSpec:
    """The row's graph (raw or known direction) and model as a checked GNN job, before its loop."""
    layers, heads = row.count("layers", high=MAX_LAYERS), row.count("heads", default=1)
    if row.get("norm") not in NORMS:
        raise ConfigError(f"{row.where}: column norm={row.get('norm')!r} must be empty or 'batch'")
    fanouts = (1,) * layers if row["loader"] == "full-graph" else row.counts("fanouts", "-")
    graphs_used = raw if raw is not None and row["source_id"] in RAW_DIRECTION_SOURCES else known
    spec = GnnSpec(name=row["dataset"], graph=graphs_used[row["dataset"]],
                   model=GnnModel(kind=KINDS[row["model"]], layers=layers, hidden=row.count("hidden") * heads,  # type: ignore[arg-type]
                                  fanouts=fanouts, heads=heads, dropout=HIDDEN_DROPOUT[row["model"]],
                                  batch_norm=NORMS[row.get("norm")], batch_norm_kernels=_batch_norm_kernels(row)))
    check_gnn(spec, row.where)
    return spec


def _batch_norm_kernels(row: Record) -> BatchNormKernels:
    """The kernels of the row's batch norms by its source's PyTorch release (:data:`SOURCE_TORCH`):
    ``per_channel`` up to
    :data:`plait.workloads.gnn.batch_norm.PER_CHANNEL_TORCH`, else (or where not stated) ``fused``."""
    return release_kernels(SOURCE_TORCH.get(row["source_id"], ""))


def _epoch_s(row: Record, spec: GnnSpec, cluster: Cluster) -> float:
    """The row's predicted epoch seconds, by the path its loader takes (full graph, factored, GPU or host loader)."""
    loader = row["loader"]
    if loader == "full-graph":
        return _full_graph_epoch_s(row, spec, cluster)
    gpus, nodes = row.count("gpus"), row.count("nodes")
    batch = row.count("batch_per_gpu")
    if loader == "gnnlab-factored":  # sampler and trainer GPUs apart (factored.py)
        return factored_epoch(spec, cluster, row.count("sampler_gpus", high=gpus), batch,
                              positive(row["cache_fraction"], "cache_fraction", row.where, False, 1.0) or 0.0,
                              row.count("feature_bytes", high=8)).epoch_s
    on_gpu = row["features_on"] == "gpu"
    strategy = "replicated" if on_gpu else "host_features"
    per_node = -(-gpus // nodes)
    if loader == "gpu":  # sampled on the GPU in the training loop; DGL's loop: feat[ids] (a new tensor) .to(device)
        spec = replace(spec, loop=GnnLoop(copy_from="pinned" if on_gpu else "pageable", ranks_per_node=per_node))
        return estimate_gnn(spec, cluster, gpus, batch, strategy, library="dgl", sampler=DGL_GPU).epoch_s
    host = loaders()[loader]
    spec = replace(spec, loop=GnnLoop(loader=loader, workers=row.count("workers"), ranks_per_node=per_node,
                                      feature_bytes=row.count("feature_bytes", high=8)))
    return estimate_gnn(spec, cluster, gpus, batch, strategy, library=host.library).epoch_s


def _full_graph_epoch_s(row: Record, spec: GnnSpec, cluster: Cluster) -> float:
    """A full-graph row's epoch seconds on one GPU, with its script's library and graph formats."""
    library = "dgl" if row["system"].startswith("DGL") else "pyg"
    # the DGL 0.5 benchmark's own SAGEConv modules aggregate the inputs in one fused product (compute.py)
    library = ("pyg_sparse" if library == "pyg" else "spmm") if spec.model.kind == "sage" else library
    spec = replace(spec, loop=GnnLoop(graph_formats=_graph_formats(row)))
    return estimate_gnn(spec, cluster, 1, 1, "full_graph", library=library).epoch_s  # type: ignore[arg-type]


def _graph_formats(row: Record) -> GraphFormats:
    """The row's ``graph_formats`` column as :attr:`plait.workloads.gnn.loop.GnnLoop.graph_formats`
    (:data:`GRAPH_FORMATS`)."""
    formats = row.get("graph_formats")
    if formats not in GRAPH_FORMATS:
        raise ConfigError(f"{row.where}: column graph_formats={formats!r} must be empty or 'csr,csc'")
    return GRAPH_FORMATS[formats]


def _plain(name: str, prefix: str) -> str:
    """A name compared without case, punctuation or a leading ``prefix`` (``ogbn_products`` as ``products``,
    ``GraphSage`` as ``sage``)."""
    return plain(name).removeprefix(prefix)


def named_as_known(row: Record, known: dict[str, GraphStats]) -> Record:
    """``row`` with its model and dataset as :data:`KINDS` and the known graphs name them, where it writes them
    otherwise (``SAGE``, ``ogbn_products``, ``Reddit``); names matching none are left for :func:`_unmodelled`."""
    models = {_plain(name, "graph"): name for name in KINDS}
    datasets = {_plain(name, "ogbn"): name for name in known}
    cells = dict(row.cells)
    cells["model"] = models.get(_plain(row["model"], "graph"), row["model"])
    cells["dataset"] = datasets.get(_plain(row["dataset"], "ogbn"), row["dataset"])
    return replace(row, cells=cells)


def validate_gnn(path: Path, progress: Progress | None = None) -> list[ClassicResult]:
    """Every row of ``path`` (the schema of ``plait/validate/data/gnn_epochs.csv``), its names as
    :func:`named_as_known` reads them."""
    known, raw = graphs(), graphs(directed=True)
    return each(read_records(path, "--gnn file", COLUMNS),
                lambda row: predict_row(named_as_known(row, known), known, raw), progress)
