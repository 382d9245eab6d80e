"""Step time, epoch time and memory per GPU of mini-batch GNN training (issue 18; :mod:`plait.workload.gnn`).

Strategies (SEEDS.md area P):

- ``sampled_dp``: data parallelism over ``W`` ranks, the graph's structure on every rank and its features cut into
  ``W`` parts, one per rank (DistDGL: Zheng et al., IA3 2020, Sec. 3, with features in device memory as in
  PaGraph/GNNLab). Each rank samples ``B`` seeds from its own part; the features its batch reads from other parts
  are fetched from their owners by all-to-all (ids out, features back) unless a static cache of the
  highest-degree nodes holds them (:mod:`plait.cost.gnn_sampling`).
- ``partition_local``: each rank samples and trains only inside its part, ignoring the edges that leave it, so no
  features move (the local phase of LLCG, 000-16: Ramezani et al., ICLR 2022, Sec. 3; its models are averaged
  every step here, and its server's global correction is not yet costed); the cut edges' information is lost to
  training, ``c`` of all edges (its effect on accuracy is not modelled).

A step (no overlap between its phases assumed: PyG's and plait's loaders sample and fetch before the forward pass):

- **sampling** on the GPU (as DGL's and GNNLab's GPU samplers do): each drawn neighbour is a random read of one
  32-byte sector of the adjacency (NVIDIA, *CUDA C++ Best Practices Guide*, "Coalesced Access to Global Memory":
  the smallest transaction), each sampled node two more (its row offsets), at the HBM's streaming rate;
- **fetch**: per peer an 8-byte count, then 8-byte ids out and ``F`` fp32 features back per missed node, by
  all-to-all on the tier the ``W`` ranks span; then every feature the batch reads is gathered into one matrix (read
  and written once in HBM);
- **compute** (PyG's layers run on every node and edge of the sampled subgraph, as plait's runtime does): per layer
  ``a -> b`` over ``n`` nodes and ``m`` sampled edges, SAGEConv's two linear maps ``2 * 2 n a b`` FLOPs and GCNConv's
  one ``2 n a b`` (PyG ``SAGEConv``/``GCNConv``), at the accelerator's fp32 peak (PyTorch runs fp32 GEMMs without TF32
  by default: ``torch.backends.cuda.matmul.allow_tf32 = False``), and the neighbour aggregation, a gather and
  scatter-add of ``m`` rows of width ``a`` (SAGE) or ``b`` (GCN) in HBM; the backward pass twice the forward
  (one GEMM for the inputs' gradient, one for the weights': Kaplan et al., arXiv 2001.08361, Sec. 2.1);
- **gradient all-reduce** of the fp32 parameters over the ``W`` ranks (DDP), and Adam's update, which reads and
  writes each parameter's 4 fp32 tensors (parameter, gradient, two moments) at the HBM's rate.

Memory per GPU: the structure (CSR: ``N + 1`` int64 offsets and ``2E`` int64 neighbour ids), the rank's part of the
features and the cache, the batch's features and each layer's saved activations (input, aggregation, output:
``n (a + a + b)`` fp32 values per layer), the parameters with their gradients and Adam's two moments (16 bytes each).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from plait.cost.compute import fp32_flops_per_s, memory_bytes_per_s
from plait.cost.gnn_sampling import SampledBatch, degree_classes, sample_batch
from plait.cost.links import collective_s
from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.workload.gnn import FEATURE_BYTES, GnnSpec

Strategy = Literal["sampled_dp", "partition_local"]
STRATEGIES: tuple[Strategy, ...] = ("sampled_dp", "partition_local")
APPROXIMATE: frozenset[Strategy] = frozenset({"partition_local"})
"""Strategies that train on less than the whole graph (they drop the edges between parts)."""
SECTOR_BYTES = 32
"""The smallest global-memory transaction of NVIDIA GPUs (module docstring)."""
INDEX_BYTES = 8
"""int64 node ids, as PyG and plait's sampler keep them."""
COUNT_BYTES = 8
"""The int64 count of requested ids each rank sends each peer before the ids."""
ADAM_STATE_BYTES = 16
"""fp32 parameter, gradient and Adam's two moments."""


@dataclass(frozen=True, kw_only=True)
class GnnEstimate:
    """One step of one rank, its parts in seconds, and the epoch."""

    strategy: Strategy
    batch: SampledBatch
    sampling_s: float
    fetch_s: float
    compute_s: float
    all_reduce_s: float
    optimizer_s: float
    fetch_bytes: float
    """What each rank sends (ids, counts, and the features it serves are the same amount over all ranks)."""
    memory_bytes: float
    steps_per_epoch: int

    @property
    def step_s(self) -> float:
        return self.sampling_s + self.fetch_s + self.compute_s + self.all_reduce_s + self.optimizer_s

    @property
    def epoch_s(self) -> float:
        return self.step_s * self.steps_per_epoch


def rank_fetch_bytes(asked: list[list[float]], rank: int, features: int) -> float:
    """Bytes ``rank`` sends to its peers to fetch features, ``asked[r][p]`` being the ids rank ``r`` asks part ``p``
    for: an int64 count to each peer, the int64 ids it asks for, and the fp32 features of the ids it is asked for."""
    peers = len(asked) - 1
    own = sum(n for p, n in enumerate(asked[rank]) if p != rank)
    served = sum(row[rank] for r, row in enumerate(asked) if r != rank)
    return peers * COUNT_BYTES + own * INDEX_BYTES + served * features * FEATURE_BYTES


def estimate_gnn(spec: GnnSpec, cluster: Cluster, world: int, batch: int, strategy: Strategy = "sampled_dp",
                 edge_cut: float | None = None, cache_fraction: float = 0.0) -> GnnEstimate:
    """The step of ``world`` ranks each training on ``batch`` seeds (module docstring)."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"strategy={strategy!r} must be one of {', '.join(STRATEGIES)}")
    if batch < 1 or world < 1:
        raise ConfigError(f"batch={batch} seeds per rank and world={world} ranks must be >= 1")
    if not 0.0 <= cache_fraction <= 1.0:
        raise ConfigError(f"cache_fraction={cache_fraction} must lie in [0, 1]")
    cut = (world - 1) / world if edge_cut is None else edge_cut
    if not 0.0 <= cut <= 1.0:
        raise ConfigError(f"edge_cut={cut} must lie in [0, 1]")
    g, acc = spec.graph, cluster.accelerator
    classes = degree_classes(g if strategy == "sampled_dp" else _part(spec, world, cut))
    if strategy == "partition_local":
        sampled = sample_batch(classes, spec.model.fanouts, batch, 1, 0.0)
    else:
        sampled = sample_batch(classes, spec.model.fanouts, batch, world, cut, cache_fraction)
    hbm = memory_bytes_per_s(acc)
    sampling_s = (sampled.sampled_edges + 2 * sampled.nodes) * SECTOR_BYTES / hbm
    peers = world - 1
    sent = 0.0
    if peers and strategy == "sampled_dp":  # every rank asks each peer for an equal share of its misses
        share = sampled.remote_misses / peers
        sent = rank_fetch_bytes([[0.0 if p == r else share for p in range(world)] for r in range(world)], 0,
                                g.features)
    spread = world / (world - 1) if world > 1 else 1.0
    fetch_s = float(collective_s(cluster, "all_to_all", world, 1, sent * spread))
    fetch_s += 2 * sampled.nodes * g.features * FEATURE_BYTES / hbm
    compute_s = 3.0 * _forward_s(spec, sampled, fp32_flops_per_s(acc), hbm)
    params = spec.model.params(g)
    all_reduce_s = float(collective_s(cluster, "all_reduce", world, 1, params * FEATURE_BYTES))
    optimizer_s = 2 * ADAM_STATE_BYTES * params / hbm
    steps = -(-g.train_nodes // (batch * world))
    return GnnEstimate(strategy=strategy, batch=sampled, sampling_s=sampling_s, fetch_s=fetch_s,
                       compute_s=compute_s, all_reduce_s=all_reduce_s, optimizer_s=optimizer_s, fetch_bytes=sent,
                       memory_bytes=_memory_bytes(spec, sampled, world, cache_fraction, strategy),
                       steps_per_epoch=steps)


def _part(spec: GnnSpec, world: int, cut: float):  # type: ignore[no-untyped-def]
    """One rank's part as a graph of its own: ``N / W`` nodes and the ``(1 - c)`` of the edges that stay inside."""
    from dataclasses import replace

    g = spec.graph
    nodes = max(1, g.nodes // world)
    edges = max(nodes // 2 + 1, round(g.edges * (1.0 - cut) / world))
    return replace(g, nodes=nodes, edges=edges, train_nodes=max(1, g.train_nodes // world),
                   max_degree=max(g.max_degree, -(-2 * edges // nodes)))


def _forward_s(spec: GnnSpec, sampled: SampledBatch, flops_per_s: float, hbm: float) -> float:
    """Forward time of every layer on the whole sampled subgraph."""
    n, m = sampled.nodes, sampled.sampled_edges
    total = 0.0
    for a, b in spec.model.widths(spec.graph):
        maps, width = (2, a) if spec.model.kind == "sage" else (1, b)
        total += maps * 2.0 * n * a * b / flops_per_s
        total += (2 * m * width + n * b) * FEATURE_BYTES / hbm  # gather and scatter-add the edges, write the output
    return total


def _memory_bytes(spec: GnnSpec, sampled: SampledBatch, world: int, cache_fraction: float,
                  strategy: Strategy) -> float:
    g = spec.graph
    structure = (g.nodes + 1 + 2 * g.edges) * INDEX_BYTES
    if strategy == "partition_local":
        structure /= world
    features = g.feature_table_bytes / world + (cache_fraction * g.feature_table_bytes)
    activations = sum(sampled.nodes * (2 * a + b) for a, b in spec.model.widths(g)) * FEATURE_BYTES
    batch_features = sampled.nodes * g.features * FEATURE_BYTES
    return structure + features + batch_features + activations + ADAM_STATE_BYTES * spec.model.params(g)
