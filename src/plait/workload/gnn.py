"""A graph neural network training job's workload (issue 18): the graph's statistics and a message-passing model
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
    [model]
    kind = "sage"               # sage | gcn
    layers = 3
    hidden = 256
    fanouts = [15, 10, 5]       # neighbours sampled per node, the seeds' hop first
"""

from __future__ import annotations

import itertools
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from plait.errors import ConfigError

GnnKind = Literal["sage", "gcn"]
KINDS: tuple[GnnKind, ...] = ("sage", "gcn")
FEATURE_BYTES = 4
"""Input features and activations in fp32 (PyG's default dtype, which plait's runtime trains in)."""


@dataclass(frozen=True, kw_only=True)
class GraphStats:
    """What the cost model needs of a graph."""

    nodes: int
    edges: int
    """Undirected edges (each stored as two directed ones, as PyG's ``to_undirected`` and OGB's loaders do)."""
    features: int
    classes: int
    train_nodes: int
    degree_exponent: float
    """Exponent ``a`` of the power law ``p(d) ~ d^-a`` the degrees follow (the smallest degree is solved so that the
    mean degree is ``2 edges / nodes``)."""
    max_degree: int

    @property
    def mean_degree(self) -> float:
        return 2.0 * self.edges / self.nodes

    @property
    def feature_table_bytes(self) -> int:
        return self.nodes * self.features * FEATURE_BYTES


@dataclass(frozen=True, kw_only=True)
class GnnModel:
    """A stack of message-passing layers; each layer maps width ``a`` to ``b``."""

    kind: GnnKind
    layers: int
    hidden: int
    fanouts: tuple[int, ...]
    """Neighbours sampled per node at each hop, the seeds' hop first (PyG's ``num_neighbors``)."""

    def widths(self, graph: GraphStats) -> list[tuple[int, int]]:
        """(in, out) of each layer, input side first."""
        dims = [graph.features, *[self.hidden] * (self.layers - 1), graph.classes]
        return list(itertools.pairwise(dims))

    def params(self, graph: GraphStats) -> int:
        """Weights and biases: SAGEConv has two linear maps (neighbour mean and self, one bias: PyG ``SAGEConv`` with
        ``root_weight=True``); GCNConv one (Kipf & Welling, ICLR 2017, Eq. 2)."""
        maps = 2 if self.kind == "sage" else 1
        return sum(maps * a * b + b for a, b in self.widths(graph))


@dataclass(frozen=True, kw_only=True)
class GnnSpec:
    """A GNN job's workload: the graph and the model."""

    name: str
    graph: GraphStats
    model: GnnModel


def is_gnn_data(data: dict[str, Any]) -> bool:
    return "graph" in data and "model" in data


def read_gnn(path: Path) -> GnnSpec:
    """The GNN a TOML file describes; one-line errors name the value and the rule."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{path}: {error}") from None
    try:
        g, m = data["graph"], data["model"]
        graph = GraphStats(nodes=int(g["nodes"]), edges=int(g["edges"]), features=int(g["features"]),
                           classes=int(g["classes"]), train_nodes=int(g.get("train_nodes", g["nodes"])),
                           degree_exponent=float(g.get("degree_exponent", 2.5)),
                           max_degree=int(g.get("max_degree", g["nodes"] - 1)))
        model = GnnModel(kind=str(m.get("kind", "sage")), layers=int(m["layers"]), hidden=int(m["hidden"]),  # type: ignore[arg-type]
                         fanouts=tuple(int(f) for f in m["fanouts"]))
    except KeyError as missing:
        raise ConfigError(f"{path}: a GNN needs {missing.args[0]!r}") from None
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{path}: {error}") from None
    spec = GnnSpec(name=str(data.get("name", path.stem)), graph=graph, model=model)
    check_gnn(spec, str(path))
    return spec


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
    if not 1.0 <= g.mean_degree <= g.max_degree:
        raise ConfigError(f"{where}: the mean degree 2 edges / nodes = {g.mean_degree:.2f} must lie in "
                          f"[1, max_degree={g.max_degree}]")
    if m.kind not in KINDS:
        raise ConfigError(f"{where}: model kind={m.kind!r} must be one of {', '.join(KINDS)}")
    if m.layers < 1 or m.hidden < 1:
        raise ConfigError(f"{where}: model layers={m.layers} and hidden={m.hidden} must be >= 1")
    if len(m.fanouts) != m.layers or any(f < 1 for f in m.fanouts):
        raise ConfigError(f"{where}: fanouts={list(m.fanouts)} must give one fanout >= 1 per layer ({m.layers})")
