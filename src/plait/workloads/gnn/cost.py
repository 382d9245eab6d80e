"""Step time, epoch time and memory per GPU of mini-batch GNN training (:mod:`plait.workloads.gnn.model`).

Strategies (SEEDS.md area P); the mini-batch ones sample ``B`` seeds per rank per step:

- ``sampled_dp``: data parallelism over ``W`` ranks, the graph's structure on every rank and its features cut into
  ``W`` parts, one per rank (DistDGL: Zheng et al., IA3 2020, Sec. 3, with features in device memory as in
  PaGraph/GNNLab). Each rank samples ``B`` seeds from its own part; the features its batch reads from other parts
  are fetched from their owners by all-to-all (ids out, features back) unless a static cache of the
  highest-degree nodes holds them (:mod:`plait.workloads.gnn.sampling`).
- ``host_features``: the features stay in host memory; each GPU's batch rows are gathered there (read and written
  at the host memory bandwidth of the GPU's share of its node) and copied over its PCIe link, as DGL's and PyG's
  loaders do with features that do not fit on the GPUs; with a cache, each GPU holds the highest-degree nodes'
  features and fetches only the misses (PaGraph: Lin et al., SoCC 2020);
- ``replicated``: every GPU holds every feature (no fetch; the memory check decides);
- ``full_graph``: one step per epoch over the whole graph (every node and edge at every layer: the DGL benchmark's
  full-graph setting); on several GPUs, GNNPipe's layer pipeline (:mod:`plait.workloads.gnn.pipe`);
- ``partition_local``: each rank samples and trains only inside its part, ignoring the edges that leave it, so no
  features move, its gradients all-reduced every step; the cut edges' information is lost to training, ``c`` of all
  edges (its effect on accuracy is not modelled);
- ``llcg``: Learn Locally, Correct Globally (000-16: Ramezani et al., ICLR 2022, Alg. 1): ``K`` local steps as
  above without synchronising, then the models averaged (one all-reduce of the parameters) and ``S`` correction
  steps by a server on mini-batches of the whole graph (one GPU holding every feature) while the others wait; each
  local step carries ``1 / K`` of the averaging and of the corrections. ``K`` and ``S``: :data:`LLCG_LOCAL_STEPS`,
  :data:`LLCG_CORRECTIONS`.

A step (no overlap between its phases assumed: PyG's and plait's loaders sample and fetch before the forward pass):

- **sampling**: :mod:`plait.workloads.gnn.sampler` (one batch at a time, or matrix-based bulks over a replicated or
  partitioned adjacency: its memory is then the part's rows only); DGL's GPU sampler with its host stream, whose
  synchronizations put the step's phases one after another (:mod:`plait.workloads.gnn.dgl_gpu_sampler`);
- **fetch**: per peer an 8-byte count, then 8-byte ids out and ``F`` fp32 features back per missed node, by three
  all-to-alls in turn (each waits for the one before: the sizes, then the ids, make the next one's splits) on the
  tier the ``W`` ranks span, the rows each rank serves gathered from its part first (``sampled_dp``), or every
  batch node's ``F`` fp32 features over PCIe (``host_features``); then every feature the batch reads is gathered
  into one matrix (read and written in HBM);
- **compute**: :mod:`plait.workloads.gnn.compute` (which nodes each layer computes depends on the library: PyG or DGL);
- **gradient all-reduce** of the fp32 parameters over the ``W`` ranks (DDP), and Adam's update, which reads and
  writes each parameter's 4 fp32 tensors (parameter, gradient, two moments) at the HBM's rate;
- the step is the longer of these (the device's) and the host's dispatch of its operations
  (:mod:`plait.workloads.gnn.dispatch`);
- the training loop around them (the spec's :class:`plait.workloads.gnn.loop.GnnLoop`): a pageable copy of host
  rows, or a host-CPU loader's workers beside the trainer (:mod:`plait.workloads.gnn.feed`).

Memory per GPU: the structure (CSR: ``N + 1`` int64 offsets and ``2E`` int64 neighbour ids), the features it holds
(its part and the cache, all of them, or none) and the batch's features, both at the stored width of a host
loader's table (``[loop] feature_bytes``; fp32 otherwise) with an fp32 copy of narrower rows
(:func:`feature_memory_bytes`), the activations and the optimizer state (:mod:`plait.workloads.gnn.compute`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from plait.cost.compute import memory_bytes_per_s
from plait.cost.links import collective_s
from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.workloads.gnn import dgl_gpu_sampler
from plait.workloads.gnn.compute import (
    INDEX_BYTES,
    LIBRARIES,
    GnnLibrary,
    activation_bytes,
    layer_sizes,
    state_bytes,
    step_compute_s,
    structure_bytes,
)
from plait.workloads.gnn.dispatch import host_step_s
from plait.workloads.gnn.feed import host_loader, loader_estimate, pageable_fetch_s
from plait.workloads.gnn.model import FEATURE_BYTES, GnnSpec, GraphStats
from plait.workloads.gnn.pipe import full_graph
from plait.workloads.gnn.sampler import COUNT_BYTES, DGL_GPU, LOOP, Sampler, sampling_time_s
from plait.workloads.gnn.sampling import DegreeClasses, SampledBatch, degree_classes, sample_batch
from plait.workloads.gnn.step import GnnEstimate

Strategy = Literal["sampled_dp", "host_features", "replicated", "full_graph", "partition_local", "llcg"]
STRATEGIES: tuple[Strategy, ...] = ("sampled_dp", "host_features", "replicated", "full_graph", "partition_local",
                                    "llcg")
LLCG_LOCAL_STEPS = 8
"""LLCG's local steps between averagings (assumed: the paper sets it per dataset; 8 is a typical local-SGD period)."""
LLCG_CORRECTIONS = 1
"""LLCG's server correction steps per averaging (assumed: a single correction step per round)."""


def rank_fetch_bytes(asked: list[list[float]], rank: int, features: int) -> float:
    """Bytes ``rank`` sends to its peers to fetch features, ``asked[r][p]`` being the ids rank ``r`` asks part ``p``
    for: an int64 count to each peer, the int64 ids it asks for, and the fp32 features of the ids it is asked for."""
    peers = len(asked) - 1
    own = sum(n for p, n in enumerate(asked[rank]) if p != rank)
    served = sum(row[rank] for r, row in enumerate(asked) if r != rank)
    return peers * COUNT_BYTES + own * INDEX_BYTES + served * features * FEATURE_BYTES


def estimate_gnn(spec: GnnSpec, cluster: Cluster, world: int, batch: int, strategy: Strategy = "sampled_dp",
                 edge_cut: float | None = None, cache_fraction: float = 0.0, library: GnnLibrary = "pyg",
                 classes: DegreeClasses | None = None, sampler: Sampler = LOOP,
                 cache_hit_rate: float | None = None) -> GnnEstimate:
    """The step of ``world`` ranks each training on ``batch`` seeds (module docstring); ``classes``: the graph's
    measured degree histogram (:func:`plait.workloads.gnn.sampling.measured_classes`) in place of the power law its
    statistics give (strategies that sample the whole graph); ``cache_hit_rate``: a measured hit rate of the
    ``host_features`` cache in place of the degree-ordered cache's (:mod:`plait.workloads.gnn.presampling`)."""
    cut = _check(world, batch, strategy, edge_cut, cache_fraction, library, cache_hit_rate)
    dgl_sampler = sampler == DGL_GPU
    if dgl_sampler:
        _check_dgl_gpu_sampler(spec, cluster, library)
    loader = host_loader(spec, strategy, library, cache_fraction, sampler != LOOP) if spec.loop.loader else None
    if strategy == "full_graph":
        return full_graph(spec, cluster, world, library)
    g, acc = spec.graph, cluster.accelerator
    hbm = memory_bytes_per_s(acc)
    params = spec.model.params(g)
    all_reduce_s = float(collective_s(cluster, "all_reduce", world, 1, params * FEATURE_BYTES))
    optimizer_s = 2 * state_bytes(spec) / hbm
    structure = structure_bytes(g)
    local = strategy in ("partition_local", "llcg")
    classes = degree_classes(_part(g, world, cut)) if local else classes or degree_classes(g)
    parts, cache = (1, 0.0) if local else (world, cache_fraction if strategy in ("sampled_dp", "host_features")
                                           else 0.0)
    sampled = sample_batch(classes, spec.model.fanouts, batch, parts, cut if parts > 1 else 0.0, cache,
                           redraw=library != "pyg")
    if dgl_sampler:  # DGL's GPU sampler: its hops' host stream and synchronizations (dgl_gpu_sampler.py)
        sampling_s = dgl_gpu_sampler.sampling_s(sampled, cluster, hbm)
    else:
        sampling_s = sampling_time_s(sampled, cluster, sampler, hbm, world)
    fetch_s, sent = _fetch(strategy, world, sampled, g.features, cluster, cache_hit_rate)
    sizes = layer_sizes(spec, sampled, library)
    held, batch_rows = feature_memory_bytes(spec, strategy, world, cache, sampled.nodes)
    memory = (structure / world if local or sampler.partitioned else structure) + held + batch_rows
    memory += activation_bytes(spec, sizes) + state_bytes(spec)
    correction_s = 0.0
    if strategy == "llcg":  # the parameters averaged once per K local steps, the server's corrections after
        all_reduce_s /= LLCG_LOCAL_STEPS
        if world > 1:
            server = estimate_gnn(spec, cluster, 1, batch, "replicated", library=library)
            correction_s = LLCG_CORRECTIONS * server.step_s / LLCG_LOCAL_STEPS
    est = GnnEstimate(strategy=strategy, batch=sampled, sampling_s=sampling_s, fetch_s=fetch_s,
                      compute_s=step_compute_s(spec, sizes, acc, library, sampled.nodes), all_reduce_s=all_reduce_s,
                      optimizer_s=optimizer_s, fetch_bytes=sent, memory_bytes=memory,
                      steps_per_epoch=-(-g.train_nodes // (batch * world)), correction_s=correction_s,
                      host_s=host_step_s(spec.model, library, acc),
                      asynchronous_launch=acc.asynchronous_launch, synchronized_sampling=dgl_sampler,
                      loop_sync_s=dgl_gpu_sampler.loop_syncs_s(cluster) if dgl_sampler else 0.0)
    if loader is not None:  # the spec's loop: a host loader's step (feed.py), or the loop's own pageable copy
        return loader_estimate(est, spec, cluster, world, loader)
    return replace(est, fetch_s=pageable_fetch_s(est, spec, cluster, world))


def _fetch(strategy: str, world: int, sampled: SampledBatch, features: int, cluster: Cluster,
           cache_hit_rate: float | None) -> tuple[float, float]:
    """Seconds a rank spends getting its batch's input rows, and the bytes it receives from elsewhere: the rows
    gathered on the GPU (read, written), after the peers' all-to-alls (``sampled_dp``) or the cache's misses copied
    from host memory (``host_features``; ``cache_hit_rate`` in place of the degree-ordered cache's) (module
    docstring)."""
    acc, hbm = cluster.accelerator, memory_bytes_per_s(cluster.accelerator)
    batch_feature_bytes = sampled.nodes * features * FEATURE_BYTES
    sent, fetch_s = 0.0, 2 * batch_feature_bytes / hbm
    if strategy == "sampled_dp" and world > 1:  # every rank asks each peer for an equal share of its misses
        share = sampled.remote_misses / (world - 1)
        sent = rank_fetch_bytes([[0.0 if p == r else share for p in range(world)] for r in range(world)], 0,
                                features)
        rounds = (COUNT_BYTES * (world - 1), sampled.remote_misses * INDEX_BYTES,
                  sampled.remote_misses * features * FEATURE_BYTES)  # counts, ids, features: one after another
        fetch_s += sum(float(collective_s(cluster, "all_to_all", world, 1, r * world / (world - 1))) for r in rounds)
        fetch_s += 2 * rounds[2] / hbm  # the rows a rank serves, gathered from its part (as many as it asks for)
    elif strategy == "host_features":  # the cache's misses gathered in host memory (read, written), copied over PCIe
        hit = sampled.cache_hit_rate if cache_hit_rate is None else cache_hit_rate
        sent = batch_feature_bytes * (1.0 - hit)
        fetch_s += 2 * sent / cluster.host_memory_bytes_per_s_per_gpu + sent / (acc.pcie_bandwidth_gb_per_s * 1e9)
    return fetch_s, sent


def feature_memory_bytes(spec: GnnSpec, strategy: str, world: int, cache: float,
                         batch_nodes: float) -> tuple[float, float]:
    """Input-feature bytes a GPU holds: its share of the table (its part and the cache, all of it, the cache, or its
    part: module docstring) and the batch's rows, both at the stored width (``[loop] feature_bytes``), the rows with
    their fp32 copy where they are stored narrower (the model's ``x.to(torch.float)``:
    :func:`plait.workloads.gnn.compute.input_cast_s`)."""
    g, width = spec.graph, spec.loop.feature_bytes
    table = g.nodes * g.features * width
    held = {"sampled_dp": table * (1.0 / world + cache), "replicated": table, "host_features": table * cache,
            "partition_local": table / world, "llcg": table / world}[strategy]
    cast = FEATURE_BYTES if width < FEATURE_BYTES else 0
    return held, batch_nodes * g.features * (width + cast)


def _check_dgl_gpu_sampler(spec: GnnSpec, cluster: Cluster, library: str) -> None:
    """Refuse, in one line, a job DGL's GPU sampler in the training loop cannot be: another library's, a host
    loader's, or one on a device without a launch queue (a CPU: no CUDA calls to issue nor to wait on)."""
    why = (f"it needs library 'dgl', not {library!r}" if library != "dgl"
           else f"it needs no host loader, not {spec.loop.loader!r}" if spec.loop.loader
           else f"it needs a GPU, not {cluster.accelerator.name}" if not cluster.accelerator.asynchronous_launch
           else "")
    if why:
        raise ConfigError(f"sampler dgl is DGL's GPU sampler in the training loop: {why}")


def _check(world: int, batch: int, strategy: str, edge_cut: float | None, cache_fraction: float,
           library: str, cache_hit_rate: float | None = None) -> float:
    """Refuse impossible options in one line; the edge cut (a random cut of ``world`` parts by default)."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"strategy={strategy!r} must be one of {', '.join(STRATEGIES)}")
    if library not in LIBRARIES:
        raise ConfigError(f"library={library!r} must be one of {', '.join(LIBRARIES)}")
    if batch < 1 or world < 1:
        raise ConfigError(f"batch={batch} seeds per rank and world={world} ranks must be >= 1")
    if not 0.0 <= cache_fraction <= 1.0:
        raise ConfigError(f"cache_fraction={cache_fraction} must lie in [0, 1]")
    if cache_hit_rate is not None and not 0.0 <= cache_hit_rate <= 1.0:
        raise ConfigError(f"cache_hit_rate={cache_hit_rate} must lie in [0, 1]")
    cut = (world - 1) / world if edge_cut is None else edge_cut
    if not 0.0 <= cut <= 1.0:
        raise ConfigError(f"edge_cut={cut} must lie in [0, 1]")
    return cut


def _part(g: GraphStats, world: int, cut: float) -> GraphStats:
    """One rank's part as a graph of its own: ``N / W`` nodes and the ``(1 - c)`` of the edges that stay inside (a
    measured histogram's degrees scaled by ``1 - c``, its nodes by ``1 / W``)."""
    nodes = max(1, g.nodes // world)
    edges = max(nodes // 2 + 1, round(g.edges * (1.0 - cut) / world))
    kept = tuple((d * (1.0 - cut), n / world) for d, n in g.degree_histogram)  # each node keeps 1 - c of its edges
    return replace(g, nodes=nodes, edges=edges, train_nodes=max(1, g.train_nodes // world), degree_histogram=kept,
                   max_degree=max(g.max_degree, -(-(edges if g.directed else 2 * edges) // nodes)))
