"""A GNN training job: a GNN TOML, a cluster, ranks and a global batch of seed nodes; one strategy
costed (:mod:`plait.workloads.gnn.cost`), or every strategy and feature-cache size searched and ranked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.units import GIB
from plait.workloads.gnn.compute import GnnLibrary
from plait.workloads.gnn.cost import STRATEGIES, Strategy, estimate_gnn
from plait.workloads.gnn.feed import LOADER_STRATEGIES, loop_notes, resolve_library
from plait.workloads.gnn.model import GnnSpec
from plait.workloads.gnn.sampler import LOOP, Sampler
from plait.workloads.gnn.step import GnnEstimate

CACHE_FRACTIONS = (0.0, 0.01, 0.05, 0.1, 0.2, 0.5)
"""Feature-cache sizes the search tries (fractions of the graph's nodes, the highest degrees first)."""


@dataclass(frozen=True, kw_only=True)
class GnnPrediction:
    """One GNN job under one strategy."""

    spec: GnnSpec
    cluster: Cluster
    world: int
    batch: int
    """Seed nodes per rank."""
    edge_cut: float
    cache_fraction: float
    library: str
    estimate: GnnEstimate
    sampler: Sampler = LOOP
    notes: tuple[str, ...] = ()
    """The spec's ``[loop]`` options this job does not read (:func:`plait.workloads.gnn.feed.loop_notes`)."""

    @property
    def fits(self) -> bool:
        return self.estimate.memory_bytes <= self.cluster.accelerator.memory_bytes

    def to_dict(self) -> dict[str, Any]:
        est, sampled = self.estimate, self.estimate.batch
        out = {
            "model": self.spec.name, "cluster": self.cluster.name, "gpus": self.world, "seeds_per_rank": self.batch,
            "global_batch": self.batch * self.world, "strategy": est.strategy, "library": self.library,
            "edge_cut": self.edge_cut, "cache_fraction": self.cache_fraction, "sampler": self.sampler.label(),
            "step_time_s": est.step_s,
            "epoch_time_s": est.epoch_s, "steps_per_epoch": est.steps_per_epoch,
            "time_breakdown_s": {"sampling": est.sampling_s, "feature_fetch": est.fetch_s, "compute": est.compute_s,
                                 "gradient_all_reduce": est.all_reduce_s, "optimizer": est.optimizer_s,
                                 "server_correction": est.correction_s, "loop_synchronizations": est.loop_sync_s},
            "host_dispatch_s": est.host_s,
            "fetch_bytes_per_rank": est.fetch_bytes, "memory_bytes": est.memory_bytes, "fits": self.fits,
            "notes": list(self.notes),
        }
        if sampled is not None:
            out.update({"batch_nodes": sampled.nodes, "batch_nodes_per_hop": list(sampled.new_nodes),
                        "sampled_edges": sampled.sampled_edges, "remote_nodes": sum(sampled.remote_nodes),
                        "fetched_nodes": sampled.remote_misses, "cache_hit_rate": sampled.cache_hit_rate})
        return out


def predict_gnn(spec: GnnSpec, hardware: Cluster, gpus: int, global_batch: int, strategy: str = "sampled_dp",
                edge_cut: float | None = None, cache_fraction: float = 0.0, library: str = "",
                sampler: Sampler = LOOP) -> GnnPrediction:
    """The job under ``strategy``; ``edge_cut`` defaults to a random cut of the graph into ``gpus`` parts;
    ``sampler``: the mini-batch strategies' sampler; ``library``: empty, PyG's or the spec's loader's
    (:func:`plait.workloads.gnn.feed.resolve_library`)."""
    library = resolve_library(spec, library)
    if gpus < 1 or global_batch < gpus or global_batch % gpus:
        raise ConfigError(f"global_batch={global_batch} must be a positive multiple of gpus={gpus} (seeds per rank)")
    batch = global_batch // gpus
    if batch > spec.graph.train_nodes // gpus:
        raise ConfigError(f"{batch} seeds per rank exceed the {spec.graph.train_nodes // gpus} training nodes of "
                          f"each of the {gpus} parts")
    cut = (gpus - 1) / gpus if edge_cut is None else edge_cut
    typed: Strategy = strategy  # type: ignore[assignment]
    kind: GnnLibrary = library  # type: ignore[assignment]
    est = estimate_gnn(spec, hardware, gpus, batch, typed, cut, cache_fraction, kind, sampler=sampler)
    return GnnPrediction(spec=spec, cluster=hardware, world=gpus, batch=batch, edge_cut=cut,
                         cache_fraction=cache_fraction, library=library, estimate=est, sampler=sampler,
                         notes=loop_notes(spec, strategy, library))


SAMPLER_CHOICES = (LOOP, Sampler(kind="matrix", bulk=8), Sampler(kind="matrix", bulk=8, partitioned=True))
"""Samplers the search tries with sampled data parallelism: one batch at a time, and matrix-based bulks of 8 (the
adjacency on every GPU, or cut into the GPUs' parts: for graphs whose structure does not fit)."""

APART = {"partition_local": "trains on less of the graph (drops the edges between parts)",
         "full_graph": "a different algorithm: one update per epoch over the whole graph",
         "llcg": "a different algorithm: local steps on parts, averaged and corrected by a server"}
"""Strategies shown beside the ranked ones, not ranked against them, and why."""


def search_gnn(spec: GnnSpec, hardware: Cluster, gpus: int, global_batch: int, edge_cut: float | None = None,
               memory_margin: float = 0.05, library: str = "") -> tuple[list[GnnPrediction], list[GnnPrediction],
                                                                         list[tuple[str, str]]]:
    """Every strategy (and, for sampled data parallelism, every cache size of :data:`CACHE_FRACTIONS` and sampler of
    :data:`SAMPLER_CHOICES`): the
    mini-batch ones that train on the whole graph and fit, ranked by epoch time; those of :data:`APART` that fit
    (shown, not ranked: a faster epoch is not a better plan by itself); and those refused, with why. A spec with a
    host loader: the strategies it feeds (:data:`plait.workloads.gnn.feed.LOADER_STRATEGIES`) only."""
    candidates = [(s, c, m) for s in STRATEGIES for c in (CACHE_FRACTIONS if s == "sampled_dp" else (0.0,))
                  for m in (SAMPLER_CHOICES if s == "sampled_dp" else (LOOP,))]
    if spec.loop.loader:
        candidates = [(s, 0.0, LOOP) for s in LOADER_STRATEGIES]
    ranked: list[GnnPrediction] = []
    apart: list[GnnPrediction] = []
    refused: list[tuple[str, str]] = []
    for strategy, cache, sampler in candidates:
        try:
            result = predict_gnn(spec, hardware, gpus, global_batch, strategy, edge_cut, cache, library, sampler)
        except ConfigError as error:
            if strategy != "full_graph":  # only full-graph training refuses a GPU count (more GPUs than layers)
                raise
            refused.append((strategy, str(error)))
            continue
        limit = (1.0 - memory_margin) * result.cluster.accelerator.memory_bytes
        if result.estimate.memory_bytes > limit:
            why = f"needs {result.estimate.memory_bytes / GIB:.1f} GiB of {limit / GIB:.1f} GiB usable"
            refused.append((strategy + (f", cache {cache:.0%}" if cache else "")
                            + (f", {sampler.label()} sampler" if sampler != LOOP else ""), why))
        else:
            (apart if strategy in APART else ranked).append(result)
    ranked.sort(key=lambda r: r.estimate.epoch_s)
    apart.sort(key=lambda r: r.estimate.epoch_s)
    return ranked, apart, refused
