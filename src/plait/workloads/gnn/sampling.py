"""Expected size of a neighbour-sampled mini-batch: nodes and edges per hop, and how many of the
nodes whose features the batch reads live on other ranks and miss the feature cache.

Sampling (GraphSAGE: Hamilton et al., NeurIPS 2017, Alg. 2; PyG's ``NeighborLoader`` and plait's runtime sampler):
``B`` seed nodes; at hop ``l`` each node first reached at hop ``l - 1`` draws ``min(f_l, d)`` of its ``d``
neighbours without replacement. The model keeps, per degree class ``d`` (``n_d`` nodes), the probability ``q_l(d)``
that a node is in the batch after hop ``l``:

- seeds are uniform over nodes (over the rank's part: below), ``q_0(d) = B / N`` on one part;
- a drawn neighbour is the end of a uniformly chosen edge end, so it lands on a given node of degree ``d`` with
  probability ``d / 2E`` (the friendship paradox: Feld, Am. J. Sociol. 1991); with ``e_l`` draws at hop ``l``, a node
  escapes them all with probability ``(1 - d / 2E)^e_l ~ exp(-e_l d / 2E)`` (occupancy of ``e_l`` balls in bins of
  unequal size: Johnson & Kotz, *Urn Models*, 1977, Ch. 6), so
  ``q_l(d) = 1 - (1 - q_{l-1}(d)) exp(-e_l d / 2E)`` and ``e_l = sum_d n_d (q_{l-1}(d) - q_{l-2}(d)) min(f_l, d)``.

Draws are assumed independent of each other and of where they start (no clustering: real graphs, whose
neighbourhoods overlap, give fewer distinct nodes than this model).

A directed graph stored in one direction (:attr:`plait.workloads.gnn.model.GraphStats.out_degree_exponent`): a node
draws ``min(f_l, d_in)`` of its ``d_in`` in-edges, and a drawn in-edge lands on its source, a node of out-degree
``d_out`` with probability ``d_out / E`` (``E`` edges, each with one source end). The classes are then the
out-degrees, by which nodes are reached; the in-degrees, by which they draw, follow their own law, assumed
independent of the out-degree, so every reached node draws the in-degree law's mean ``E[min(f_l, d_in)]``.

Degrees follow a shifted discrete power law ``p(d) ~ (d + s)^-a`` on ``1..max_degree`` (a Pareto II / Lomax form:
Newman, Contemp. Phys. 2005, Sec. 2), ``s`` solved so that the mean is ``2E / N`` (``E / N`` for a directed
graph's in- and out-degrees).

Where the nodes live: the graph is cut into ``P`` equal parts, a fraction ``c`` of each node's edges leaving its
part (random assignment of nodes to parts cuts ``c = (P - 1) / P``). The seeds are uniform over the rank's own part;
the batch is tracked apart in the rank's part (``n_d / P`` nodes of each class, ``2E / P`` edge ends) and in the
others (the rest, as one pool): of the draws from the own part's new nodes ``1 - c`` land in it and ``c`` outside,
of the draws from elsewhere ``c / (P - 1)`` come back (each a two-state Markov step), and each pool fills by the
occupancy rule above with its own bins. A static cache of the highest-degree nodes' features (PaGraph: Lin et al.,
SoCC 2020, Sec. 4) serves a remote node when its degree class is among the cached.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from plait.kept import MISSING, Kept
from plait.workloads.gnn.model import GraphStats


@dataclass(frozen=True, kw_only=True)
class DegreeClasses:
    """Degrees ``1..max_degree`` and the expected number of nodes of each."""

    degrees: np.ndarray
    """Each class's degree: a node's degree, or a directed graph's out-degree (by which a draw lands on it)."""
    nodes: np.ndarray
    edges: int
    """Undirected edges (two ends each), or a directed graph's edges (one source each)."""
    in_degrees: np.ndarray | None = None
    """A directed graph's in-degrees (by which nodes draw); ``None``: undirected."""
    in_nodes: np.ndarray | None = None
    """Nodes of each in-degree (``in_degrees``)."""

    @property
    def landing_ends(self) -> float:
        """Edge ends a draw lands on uniformly: ``2E`` undirected, ``E`` sources directed."""
        return float(self.edges if self.in_degrees is not None else 2 * self.edges)

    def draws(self, drawing: np.ndarray, fanout: int) -> float:
        """Neighbours the nodes ``drawing`` (per class) draw at a fanout of ``fanout`` (module docstring)."""
        if self.in_degrees is None or self.in_nodes is None:
            return float((drawing * np.minimum(fanout, self.degrees)).sum())
        mean = float((self.in_nodes * np.minimum(fanout, self.in_degrees)).sum() / self.in_nodes.sum())
        return float(drawing.sum()) * mean

    def slots(self, drawing: np.ndarray) -> float:
        """Neighbour slots (in-edges, directed) the nodes ``drawing`` hold."""
        if self.in_degrees is None or self.in_nodes is None:
            return float((drawing * self.degrees).sum())
        return float(drawing.sum()) * float((self.in_nodes * self.in_degrees).sum() / self.in_nodes.sum())


def degree_classes(graph: GraphStats) -> DegreeClasses:
    """The graph's measured histogram (:attr:`GraphStats.degree_histogram`) where it has one and is undirected; else
    the shifted power law of the module docstring, its shift found by bisection on the mean; a directed graph's
    out-degree classes with its in-degree law beside them. Kept by the graph's value for the last
    :data:`KEPT_GRAPHS` graphs whose arrays hold at most :data:`KEPT_BYTES`: a law over a web graph's millions of
    degrees takes about a second to solve, and every estimate of the graph (a validation's rows, a search's plans)
    reads the same classes. The arrays are read-only."""
    key = (graph,)
    found = _CLASSES.find(key)
    if found is not MISSING:
        return found  # type: ignore[return-value]
    classes = _solved(graph)
    arrays = [a for a in (classes.degrees, classes.nodes, classes.in_degrees, classes.in_nodes) if a is not None]
    for array in arrays:  # shared by every estimate that reads them
        array.flags.writeable = False
    return _CLASSES.keep(key, (), classes) if sum(a.nbytes for a in arrays) <= KEPT_BYTES else classes


KEPT_GRAPHS = 8
"""Graphs whose classes are kept: the shipped GNN validation reads 6 (130 MB in all)."""
KEPT_BYTES = 128 * 2**20
"""The largest classes kept (twitter-2010's directed laws hold 96 MB); a graph's default ``max_degree`` is its node
count less one, whose classes (1.2 GB for uk-2006-05 undirected) are computed afresh each time rather than held."""
_CLASSES: Kept[DegreeClasses] = Kept(KEPT_GRAPHS)


def _solved(graph: GraphStats) -> DegreeClasses:
    """:func:`degree_classes`, computed."""
    if graph.degree_histogram and not graph.directed:
        d, n = (np.array(column, dtype=np.float64) for column in zip(*graph.degree_histogram, strict=True))
        return DegreeClasses(degrees=d, nodes=n, edges=graph.edges)
    d, nodes = _power_law(graph, graph.out_degree_exponent if graph.directed else graph.degree_exponent)
    if not graph.directed:
        return DegreeClasses(degrees=d, nodes=nodes, edges=graph.edges)
    d_in, n_in = _power_law(graph, graph.degree_exponent)
    return DegreeClasses(degrees=d, nodes=nodes, edges=graph.edges, in_degrees=d_in, in_nodes=n_in)


def _power_law(graph: GraphStats, exponent: float) -> tuple[np.ndarray, np.ndarray]:
    """Degrees ``1..max_degree`` and their expected nodes under the shifted law of mean ``graph.mean_degree``."""
    d = np.arange(1, graph.max_degree + 1, dtype=np.float64)
    target = graph.mean_degree

    def mean(shift: float) -> float:
        w = (d + shift) ** -exponent
        return float((d * w).sum() / w.sum())

    lo, hi = -1.0 + 1e-9, 1.0
    while mean(hi) < target and hi < 1e12:
        hi *= 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):  # lo and hi adjacent doubles: every later step leaves their midpoint at mid
            break
        lo, hi = (mid, hi) if mean(mid) < target else (lo, mid)
    w = (d + 0.5 * (lo + hi)) ** -exponent
    return d, graph.nodes * w / w.sum()


def measured_classes(degree_counts: list[int] | np.ndarray) -> DegreeClasses:
    """Degree classes of a real graph: ``degree_counts[d]`` nodes of degree ``d`` (its degree histogram)."""
    counts = np.asarray(degree_counts, dtype=np.float64)
    d = np.arange(counts.size, dtype=np.float64)
    return DegreeClasses(degrees=d, nodes=counts, edges=round(float((d * counts).sum()) / 2))


@dataclass(frozen=True, kw_only=True)
class SampledBatch:
    """Expected sizes of one rank's mini-batch."""

    new_nodes: tuple[float, ...]
    """Nodes first reached at each hop, the seeds first (``layers + 1`` entries)."""
    edges: tuple[float, ...]
    """Neighbours drawn at each hop (``layers`` entries)."""
    remote_nodes: tuple[float, ...]
    """Of ``new_nodes``, those held by another rank's part."""
    remote_misses: float
    """Remote nodes whose features are not in the cache: what the rank fetches."""
    scanned: tuple[float, ...]
    """Neighbour slots the drawing nodes hold at each hop (the sum of their degrees): what a sampler that orders
    every node's neighbours before drawing (plait's CPU sampler, :mod:`plait.run.sampler`) passes over."""
    remote_scanned: tuple[float, ...]
    """Of ``scanned``, the slots of drawing nodes held by another rank's part (what a partitioned adjacency's other
    owners serve)."""
    cached_nodes: float = 0.0
    """Of all the batch's nodes, those whose features the degree-ordered cache holds (own part or not)."""

    @property
    def nodes(self) -> float:
        return sum(self.new_nodes)

    @property
    def cache_hit_rate(self) -> float:
        """Share of the batch's feature reads the degree-ordered cache serves: the batch reaches a node of degree
        ``d`` with a probability that grows with ``d`` (module docstring), so a cache of the highest degrees serves
        more than its share of the nodes (PaGraph: Lin et al., SoCC 2020, Sec. 4; GNNLab: Yang et al., EuroSys 2022,
        Sec. 5, whose pre-sampling ranks nodes by their measured visits instead)."""
        return self.cached_nodes / self.nodes if self.nodes else 0.0

    def within(self, hops: int) -> float:
        """Nodes at most ``hops`` hops from the seeds."""
        return sum(self.new_nodes[: hops + 1])

    @property
    def sampled_edges(self) -> float:
        return sum(self.edges)


def sample_batch(classes: DegreeClasses, fanouts: tuple[int, ...], seeds: float, parts: int, edge_cut: float,
                 cache_fraction: float = 0.0, redraw: bool = False) -> SampledBatch:
    """Expected sizes of a batch of ``seeds`` seed nodes drawn from one rank's part (module docstring). ``redraw``:
    every node of the batch so far draws at each hop (DGL's ``MultiLayerNeighborSampler`` builds each layer's block
    for all the next layer's nodes), not only the nodes the previous hop reached (PyG's ``NeighborLoader``)."""
    d, n_d = classes.degrees, classes.nodes
    total = float(n_d.sum())
    share = (1.0 / parts, (parts - 1) / parts)  # of each class: in the rank's part, in the others
    back = edge_cut / (parts - 1) if parts > 1 else 0.0
    q = [np.full_like(d, min(1.0, seeds * parts / total)), np.zeros_like(d)]
    fresh = [n_d * share[0] * q[0], np.zeros_like(d)]  # nodes first reached at the latest hop, per class
    hops, edges, scanned, remote_scanned = [fresh], [], [], []
    for fanout in fanouts:
        drawing = [n_d * share[k] * q[k] for k in (0, 1)] if redraw else fresh
        out = [classes.draws(f, fanout) for f in drawing]
        scanned.append(sum(classes.slots(f) for f in drawing))
        remote_scanned.append(classes.slots(drawing[1]))
        landing = (out[0] * (1.0 - edge_cut) + out[1] * back, out[0] * edge_cut + out[1] * (1.0 - back))
        after = [1.0 - (1.0 - q[k]) * np.exp(-landing[k] * d / (classes.landing_ends * share[k])) if share[k] else q[k]
                 for k in (0, 1)]
        fresh = [n_d * share[k] * (after[k] - q[k]) for k in (0, 1)]
        q = after
        hops.append(fresh)
        edges.append(sum(out))
    cached = _cached(n_d, cache_fraction * total)
    uncached = 1.0 - cached
    return SampledBatch(cached_nodes=sum(float(((h[0] + h[1]) * cached).sum()) for h in hops),new_nodes=tuple(float(h[0].sum() + h[1].sum()) for h in hops), edges=tuple(edges),
                        remote_nodes=tuple(float(h[1].sum()) for h in hops),
                        remote_misses=sum(float((h[1] * uncached).sum()) for h in hops), scanned=tuple(scanned),
                        remote_scanned=tuple(remote_scanned))


def _cached(n_d: np.ndarray, capacity: float) -> np.ndarray:
    """Fraction of each degree class (ascending degrees) whose features the cache holds: the highest degrees first."""
    above = np.cumsum(n_d[::-1])[::-1] - n_d  # nodes of higher degree than each class
    return np.clip((capacity - above) / np.maximum(n_d, 1e-300), 0.0, 1.0)
