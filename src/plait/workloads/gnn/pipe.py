"""Full-graph GNN training: on one GPU, and on several by GNNPipe's layer pipeline (000-11: Chen et al.,
"GNNPipe: Scaling Deep GNN Training with Pipelined Model Parallelism", arXiv 2308.10087, Sec. 3-4).

One GPU: every layer on every node and edge, forward and backward (:mod:`plait.workloads.gnn.compute`), and, in DGL
on a graph that holds its COO, the backward's reversed graphs rebuilt (:mod:`plait.workloads.gnn.dgl_reverse`), one
step per epoch.

GNNPipe on ``p`` GPUs: the ``L`` layers in ``p`` contiguous stages (balanced by their time), the graph's nodes in
``C`` chunks streamed through the stages. A chunk's layer needs its neighbours' embeddings from the layer below,
some in chunks not yet computed: GNNPipe takes those from the previous epoch (historical embeddings), so a chunk
depends only on itself in the stage below and the pipeline fills once per pass: the epoch's forward and backward
take the slowest stage's time times ``1 + (p - 1) / C`` (GPipe's bubble: Huang et al., NeurIPS 2019, Sec. 2.2).
Each stage boundary carries every node's embedding forward and its gradient back (``N`` rows of the boundary's width
in fp32), point to point, overlapped with the next chunk's compute. A stage holds the structure, its layers'
activations and a historical embedding of every node per layer it owns; the first stage also the input features.
There is no gradient all-reduce: each GPU owns its layers' weights.
"""

from __future__ import annotations

from plait.cost.compute import memory_bytes_per_s
from plait.cost.links import collective_s
from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.workloads.gnn.compute import (
    GnnLibrary,
    activation_bytes,
    layer_compute_s,
    layer_sizes,
    state_bytes,
    structure_bytes,
)
from plait.workloads.gnn.dgl_reverse import reversals_s
from plait.workloads.gnn.dispatch import host_step_s
from plait.workloads.gnn.model import FEATURE_BYTES, GnnSpec
from plait.workloads.gnn.step import GnnEstimate

CHUNKS_PER_STAGE = 4
"""GNNPipe's chunks per pipeline stage (assumed: the paper tunes the chunk count per graph; 4 per stage keeps the
fill at a quarter of a stage's work or less)."""


def full_graph(spec: GnnSpec, cluster: Cluster, world: int, library: GnnLibrary) -> GnnEstimate:
    """One epoch of full-graph training (module docstring)."""
    layers = spec.model.layers
    if world > layers:
        raise ConfigError(f"full_graph on {world} GPUs: GNNPipe gives each GPU whole layers and the model has "
                          f"{layers}; use at most {layers} GPUs")
    g, acc = spec.graph, cluster.accelerator
    hbm = memory_bytes_per_s(acc)
    sizes = layer_sizes(spec, None, library)
    times = layer_compute_s(spec, sizes, acc, library)
    stages = _balanced(times, world)
    slowest = max(sum(times[a:b]) + reversals_s(spec, library, acc, a, b) for a, b in stages)
    chunks = CHUNKS_PER_STAGE * world if world > 1 else 1
    compute = slowest * (1.0 + (world - 1) / chunks)
    widths = spec.model.widths(g)
    crossing = boundary_bytes(spec, stages)
    exposed = 0.0
    for boundary in crossing:  # each boundary's output embeddings, then their gradients
        send = 2 * chunks * float(collective_s(cluster, "p2p", world, 1, boundary / chunks))
        exposed = max(exposed, send - compute)
    sent = max(rank_pipe_bytes(crossing))
    optimizer = 2 * state_bytes(spec) / hbm / world
    memory = 0.0
    for a, b in stages:
        held = structure_bytes(g) + (g.feature_table_bytes if a == 0 else 0.0) + state_bytes(spec) / world
        held += activation_bytes(spec, sizes, a, b)
        if world > 1:
            held += sum(g.nodes * wb for _, wb in widths[a:b]) * FEATURE_BYTES  # historical embeddings
        memory = max(memory, held)
    return GnnEstimate(strategy="full_graph", batch=None, sampling_s=0.0, fetch_s=exposed, compute_s=compute,
                       all_reduce_s=0.0, optimizer_s=optimizer, fetch_bytes=sent, memory_bytes=memory,
                       steps_per_epoch=1, host_s=host_step_s(spec.model, library, acc),
                       asynchronous_launch=acc.asynchronous_launch)


def boundary_bytes(spec: GnnSpec, stages: list[tuple[int, int]]) -> list[float]:
    """Bytes crossing each boundary between consecutive stages per epoch, one way: every node's fp32 embedding out
    of the stage's last layer (sent forward; their gradients come back as many)."""
    widths = spec.model.widths(spec.graph)
    return [float(spec.graph.nodes * widths[b - 1][1] * FEATURE_BYTES) for _, b in stages[:-1]]


def rank_pipe_bytes(crossing: list[float]) -> list[float]:
    """Bytes each stage sends per epoch, given :func:`boundary_bytes`: its output's embeddings forward (all but the
    last) and its input's gradients back (all but the first)."""
    stages = len(crossing) + 1
    return [(crossing[r] if r < stages - 1 else 0.0) + (crossing[r - 1] if r else 0.0) for r in range(stages)]


def _balanced(times: list[float], stages: int) -> list[tuple[int, int]]:
    """Contiguous layer ranges ``[a, b)`` whose slowest sum is least (every split tried: a model has few layers)."""
    from itertools import combinations, pairwise

    n = len(times)
    best: list[tuple[int, int]] = [(0, n)]
    best_time = float("inf")
    for cuts in combinations(range(1, n), stages - 1):
        bounds = [0, *cuts, n]
        ranges = list(pairwise(bounds))
        slowest = max(sum(times[a:b]) for a, b in ranges)
        if slowest < best_time:
            best, best_time = ranges, slowest
    return best
