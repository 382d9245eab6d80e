"""The hit rate of GNNLab's pre-sampling feature cache (PreSC: Yang et al., *GNNLab: A Factored System for
Sample-based GNN Training over GPUs*, EuroSys 2022, Sec. 5), where GNNLab published it (``data/presampling_hits.toml``).

PreSC samples one epoch ahead, counts how often the batches reach each node and caches the most reached nodes'
features, so it caches what the training set's neighbourhoods actually touch. A degree-ordered cache
(:attr:`plait.workloads.gnn.sampling.SampledBatch.cache_hit_rate`) assumes batches drawn from uniform seeds over the
whole graph; GNNLab's own Figure 10 output shows what that misses on ogbn-papers100M, whose training set is 1.1% of
the nodes: at a cache of 10% of the nodes its degree policy hits 49.6% of the reads, PreSC 98.3% and the optimal
cache 100% (everything an epoch reads fits in a tenth of the graph).

Between published cache sizes the hit rate is read off the chords through them, from ``(0, 0)`` to ``(1, 1)``:
PreSC caches nodes in descending order of their counts, so each further cached node serves no more reads than the
one before and the hit rate is concave in the cache's size; a chord of a concave curve lies on or below it, so the
chord is a lower bound, off by at most the rise between the two published points.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from importlib import resources

import numpy as np

from plait.errors import ConfigError
from plait.schema import build
from plait.workloads.gnn.model import GnnSpec


@dataclass(frozen=True, kw_only=True)
class HitCurve:
    """Published PreSC hit rates of one dataset, model and batch."""

    dataset: str
    directed: bool
    """Whether the graph is stored as its raw directed edges (GNNLab's ogbn-papers100M)."""
    kind: str
    fanouts: tuple[int, ...]
    """Seed hop first."""
    batch: int
    cache_fractions: tuple[float, ...]
    """The cache's share of the graph's nodes, ascending."""
    hit_rates: tuple[float, ...]
    """The share of a batch's feature reads the cache served at each size."""
    source: str

    def __post_init__(self) -> None:
        points = (0.0, *self.cache_fractions, 1.0), (0.0, *self.hit_rates, 1.0)
        if (
            len(self.cache_fractions) != len(self.hit_rates)
            or any(np.diff(points[0]) <= 0)
            or any(np.diff(points[1]) < 0)
        ):
            raise ConfigError(
                f"presampling_hits.toml {self.dataset} {self.kind}: cache fractions must rise in "
                "(0, 1) and hit rates must not fall, one for each"
            )


@functools.cache
def curves() -> tuple[HitCurve, ...]:
    """The curves of ``data/presampling_hits.toml``, checked (:func:`plait.schema.build`)."""
    data = tomllib.loads(resources.files("plait.workloads.gnn").joinpath("data/presampling_hits.toml").read_text())
    return tuple(build(HitCurve, raw, f"presampling_hits.toml:curve[{i}]") for i, raw in enumerate(data["curve"]))


def presampled_hit_rate(spec: GnnSpec, batch: int, cache_fraction: float) -> float | None:
    """PreSC's hit rate for ``spec`` trained on ``batch`` seeds with a cache of ``cache_fraction`` of the nodes, on
    the chords through GNNLab's published points (module docstring); ``None`` where none was published."""
    for c in curves():
        if (c.dataset, c.directed, c.kind, c.fanouts, c.batch) == (
            spec.name,
            spec.graph.directed,
            spec.model.kind,
            spec.model.fanouts,
            batch,
        ):
            return float(np.interp(cache_fraction, (0.0, *c.cache_fractions, 1.0), (0.0, *c.hit_rates, 1.0)))
    return None
