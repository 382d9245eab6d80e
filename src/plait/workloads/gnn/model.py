"""A graph neural network training job's workload: the graph's statistics and a message-passing model
trained on mini-batches of seed nodes with neighbour sampling (GraphSAGE: Hamilton et al., NeurIPS 2017, Alg. 2).

A TOML file describes it (``examples/graphsage-ogbn-products.toml``)::

    name = "..."
    [graph]
    nodes = 2449029
    edges = 61859140            # undirected edges; each is two directed ones
    features = 100              # input feature width
    classes = 47
    train_nodes = 196615
    degree_exponent = 2.1       # degrees follow a discrete power law p(d) ~ d^-a on [d_min, max_degree]
    max_degree = 20000
    # out_degree_exponent = 4.0 # a directed graph sampled by in-edges (estimates only); 0 or absent: undirected
    # or a graph plait knows (data/graphs.toml), any field above given beside it replacing the known one:
    # dataset = "ogbn-papers100M"   # ogbn-products, ogbn-arxiv, ogbn-papers100M, reddit, twitter-2010, ...
    # direction = "raw"             # symmetrized (default) | raw: the stored arcs, sampled by in-arc
    [model]
    kind = "sage"               # sage | gcn | gat | transformer | gin
    heads = 1                   # attention heads (gat, transformer); must divide hidden
    layers = 3
    hidden = 256
    fanouts = [15, 10, 5]       # neighbours sampled per node, the seeds' hop first
    [loop]                      # optional: how the script holds the graph and feeds batches (plait.workloads.gnn.loop)
    loader = "dgl-cpu"
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from plait.errors import ConfigError
from plait.schema import build, check_keys, table, value
from plait.workload.files import read_toml
from plait.workloads.gnn.batch_norm import BATCH_NORM_KERNELS, BatchNormKernels
from plait.workloads.gnn.loop import DEFAULT_LOOP, GnnLoop

GnnKind = Literal["sage", "gcn", "gat", "transformer", "gin"]
KINDS: tuple[GnnKind, ...] = ("sage", "gcn", "gat", "transformer", "gin")
ATTENTION_KINDS: tuple[GnnKind, ...] = ("gat", "transformer")
FEATURE_BYTES = 4
"""Input features and activations in fp32 (PyG's default dtype, which plait's runtime trains in)."""


@dataclass(frozen=True, kw_only=True)
class GraphStats:
    """What the cost model needs of a graph."""

    nodes: int
    """Nodes of the graph."""
    edges: int
    """Undirected edges (each stored as two directed ones, as PyG's ``to_undirected`` and OGB's loaders do)."""
    features: int
    """Input feature width."""
    classes: int
    """Output classes."""
    train_nodes: int
    """Nodes with training labels (a file's default: every node)."""
    degree_exponent: float = 2.5
    """Exponent ``a`` of the power law ``p(d) ~ d^-a`` the degrees follow (the smallest degree is solved so that the
    mean degree is ``2 edges / nodes``)."""
    max_degree: int
    """The largest degree (a file's default: ``nodes - 1``)."""
    out_degree_exponent: float = 0.0
    """0: the graph is undirected (each edge stored both ways). Above 1: the edges are stored in one direction only and
    each node samples its in-edges (a citation graph kept as the CSC of its raw edges, without inverse edges: GNNLab's
    ``datagen/papers100M.py``); ``degree_exponent`` is then the in-degree's and this the out-degree's, the exponent of
    the law a drawn in-edge's source follows (:mod:`plait.workloads.gnn.sampling`)."""
    degree_histogram: tuple[tuple[float, float], ...] = ()
    """A measured degree histogram of the undirected graph, ``(degree, nodes)`` classes in ascending degree, used in
    place of the power law (``degree_exponent``, ``max_degree``); empty: the power law. Ignored for a directed graph,
    whose in- and out-degree laws it does not give."""

    @property
    def directed(self) -> bool:
        return self.out_degree_exponent > 0.0

    @property
    def stored_edges(self) -> int:
        """Edges as the adjacency stores them: each undirected edge twice, each directed edge once."""
        return self.edges if self.directed else 2 * self.edges

    @property
    def mean_degree(self) -> float:
        """Mean degree (undirected), or mean in-degree (= mean out-degree) of a directed graph."""
        return self.stored_edges / self.nodes

    @property
    def feature_table_bytes(self) -> int:
        return self.nodes * self.features * FEATURE_BYTES


@dataclass(frozen=True, kw_only=True)
class GnnModel:
    """A stack of message-passing layers; each layer maps width ``a`` to ``b``.

    Attention layers follow PyG's conventions: a hidden layer has ``heads`` heads of ``hidden / heads`` channels,
    concatenated to ``hidden``; the last has ``heads`` heads of ``classes`` channels, averaged (PyG's ``GAT`` model:
    ``concat=False`` on its last ``GATConv``), so its maps produce ``heads * classes`` values per node."""

    kind: GnnKind = "sage"
    """The layer (:data:`KINDS`)."""
    layers: int
    """Message-passing layers."""
    hidden: int
    """Hidden width."""
    fanouts: tuple[int, ...]
    """Neighbours sampled per node at each hop, the seeds' hop first (PyG's ``num_neighbors``)."""
    heads: int = 1
    """Attention heads (gat, transformer); must divide ``hidden``."""
    dropout: bool = False
    """Whether dropout follows every hidden layer's activation (torch's ``F.dropout``/``nn.Dropout`` in training
    mode: :data:`plait.workloads.gnn.compute.DROPOUT_VALUES`); plait's own runtime model has none."""
    batch_norm: bool = False
    """Whether a ``BatchNorm1d`` normalizes every hidden layer's output before its activation (training mode:
    :data:`plait.workloads.gnn.batch_norm.BATCH_NORM_VALUES`); plait's own runtime model has none."""
    batch_norm_kernels: BatchNormKernels = "fused"
    """Which PyTorch CUDA kernels run those batch norms: ``fused`` (PyTorch from 1.9, assumed), or ``per_channel``
    (PyTorch 1.8 and before: above 131,070 rows ATen's kernels with one block per channel,
    :mod:`plait.workloads.gnn.batch_norm`)."""

    def widths(self, graph: GraphStats) -> list[tuple[int, int]]:
        """(in, out) of each layer, input side first."""
        dims = [graph.features, *[self.hidden] * (self.layers - 1), graph.classes]
        return list(itertools.pairwise(dims))

    def mapped_widths(self, graph: GraphStats) -> list[int]:
        """Values each layer's linear maps produce per node: its output width, or ``heads * classes`` for an
        attention model's last layer (its heads averaged after aggregation)."""
        last = self.heads * graph.classes if self.kind in ATTENTION_KINDS else graph.classes
        return [b for _, b in self.widths(graph)[:-1]] + [last]

    @property
    def maps(self) -> int:
        """Linear maps of the input per layer: SAGEConv's neighbour and root maps; GCNConv's and GATConv's one;
        TransformerConv's query, key, value and skip; GINConv's two-layer MLP (the second map reads the first's
        output)."""
        return {"sage": 2, "gcn": 1, "gat": 1, "transformer": 4, "gin": 2}[self.kind]

    def params(self, graph: GraphStats) -> int:
        """Weights and biases (PyG's layers): SAGEConv two maps, one bias (``root_weight=True``); GCNConv one map
        and a bias (Kipf & Welling, ICLR 2017, Eq. 2); GATConv one map without bias, the source and target attention
        vectors (``2 h c``) and a bias of the output (Velickovic et al., ICLR 2018, Eq. 1-3); TransformerConv four
        maps with biases, the skip one to the output width (Shi et al., IJCAI 2021, Eq. 3-5); GINConv's MLP of two maps
        with biases, ``a -> b -> b`` (Xu et al., ICLR 2019, Eq. 4.1; PyG ``GIN``)."""
        total = 0
        for (a, b), w in zip(self.widths(graph), self.mapped_widths(graph), strict=True):
            total += {"sage": 2 * a * b + b, "gcn": a * b + b, "gat": a * w + 2 * w + b,
                      "transformer": 3 * (a * w + w) + a * b + b, "gin": a * b + b * b + 2 * b}[self.kind]
        return total


@dataclass(frozen=True, kw_only=True)
class GnnSpec:
    """A GNN job's workload: the graph, the model and the training loop around it."""

    name: str
    graph: GraphStats
    model: GnnModel
    loop: GnnLoop = DEFAULT_LOOP
    """How the script holds the graph and feeds its batches (:mod:`plait.workloads.gnn.loop`; its defaults)."""


def is_gnn_data(data: dict[str, Any]) -> bool:
    return "graph" in data and "model" in data


def read_gnn(path: Path) -> GnnSpec:
    """The GNN a TOML file describes, through the strict schema (:func:`plait.schema.build`: unknown keys, missing
    keys and wrong types are errors naming the key); one-line errors name the value and the rule."""
    data = read_toml(path)
    where = str(path)
    check_keys(data, ("graph", "model", "name", "loop"), where)
    for key in ("graph", "model"):
        if key not in data:
            raise ConfigError(f"{where}: a GNN needs {key!r}")
    graph = _graph(table(data["graph"], f"{where}: [graph]"), f"{where}: [graph]")
    model = build(GnnModel, table(data["model"], f"{where}: [model]"), f"{where}: [model]")
    loop = build(GnnLoop, table(data.get("loop", {}), f"{where}: [loop]"), f"{where}: [loop]")
    spec = GnnSpec(name=value(data.get("name", path.stem), str, f"{where}: name"), graph=graph, model=model,
                   loop=loop)
    check_gnn(spec, str(path))
    return spec


def _graph(g: Mapping[str, Any], where: str) -> GraphStats:
    """The ``[graph]`` table: its fields, or the statistics of the graph plait knows by ``dataset``
    (:func:`plait.workloads.gnn.datasets.graphs`, symmetrized or in its raw ``direction``) with the fields given beside
    it replacing the known ones."""
    name = None if g.get("dataset") is None else value(g["dataset"], str, f"{where}.dataset")
    direction = value(g.get("direction", "symmetrized"), str, f"{where}.direction")
    fields = {k: v for k, v in g.items() if k not in ("dataset", "direction")}
    if name is None:
        if "direction" in g:
            raise ConfigError(f"{where}: direction={direction!r} needs a dataset (a graph plait knows)")
        nodes = fields.get("nodes")
        derived = {"train_nodes": nodes, "max_degree": nodes - 1} if type(nodes) is int else {}  # defaults from nodes
        return build(GraphStats, {**derived, **fields}, where)
    from plait.workloads.gnn.datasets import graphs  # data/graphs.toml, read for a file that names a dataset

    if direction not in ("symmetrized", "raw"):
        raise ConfigError(f"{where}: direction={direction!r} must be 'symmetrized' or 'raw'")
    known = graphs(directed=direction == "raw")
    if name not in known:
        raise ConfigError(f"{where}: dataset={name!r} must be one of {', '.join(known)}")
    if direction == "raw" and not known[name].directed:
        directed = ", ".join(n for n, k in known.items() if k.directed)
        raise ConfigError(f"{where}: dataset={name!r} has no raw direction in plait's statistics (those with one: "
                          f"{directed})")
    base = {f.name: getattr(known[name], f.name) for f in dataclasses.fields(GraphStats)}
    if fields:  # a field given replaces the known one; a measured histogram then no longer describes the graph
        base["degree_histogram"] = ()
    return build(GraphStats, {**base, **fields}, where)


def check_gnn(spec: GnnSpec, where: str) -> None:
    """Refuse what no graph or model can be."""
    g, m = spec.graph, spec.model
    for name in ("nodes", "edges", "features", "classes", "train_nodes", "max_degree"):
        if getattr(g, name) <= 0:
            raise ConfigError(f"{where}: graph {name}={getattr(g, name)} must be > 0")
    if g.train_nodes > g.nodes:
        raise ConfigError(f"{where}: train_nodes={g.train_nodes} must be at most nodes={g.nodes}")
    if not (math.isfinite(g.degree_exponent) and g.degree_exponent > 1.0):
        raise ConfigError(f"{where}: degree_exponent={g.degree_exponent} must be > 1 (a power law with a mean)")
    if g.out_degree_exponent != 0.0 and not (math.isfinite(g.out_degree_exponent) and g.out_degree_exponent > 1.0):
        raise ConfigError(f"{where}: out_degree_exponent={g.out_degree_exponent} must be 0 (undirected) or > 1")
    if not 1.0 <= g.mean_degree <= g.max_degree:
        raise ConfigError(f"{where}: the mean degree {g.stored_edges} stored edges / nodes = {g.mean_degree:.2f} must "
                          f"lie in [1, max_degree={g.max_degree}]")
    if m.kind not in KINDS:
        raise ConfigError(f"{where}: model kind={m.kind!r} must be one of {', '.join(KINDS)}")
    if m.batch_norm_kernels not in BATCH_NORM_KERNELS:
        raise ConfigError(f"{where}: model batch_norm_kernels={m.batch_norm_kernels!r} must be one of "
                          f"{', '.join(BATCH_NORM_KERNELS)}")
    if m.layers < 1 or m.hidden < 1:
        raise ConfigError(f"{where}: model layers={m.layers} and hidden={m.hidden} must be >= 1")
    if m.heads < 1 or (m.kind in ATTENTION_KINDS and m.hidden % m.heads):
        raise ConfigError(f"{where}: heads={m.heads} must be >= 1 and divide hidden={m.hidden}")
    if m.heads > 1 and m.kind not in ATTENTION_KINDS:
        raise ConfigError(f"{where}: heads={m.heads} needs an attention kind ({', '.join(ATTENTION_KINDS)})")
    if len(m.fanouts) != m.layers or any(f < 1 for f in m.fanouts):
        raise ConfigError(f"{where}: fanouts={list(m.fanouts)} must give one fanout >= 1 per layer ({m.layers})")
