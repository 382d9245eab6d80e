"""The layers' time and the memory of one GNN step on one GPU (issue 18; :mod:`plait.cost.gnn`).

Which nodes and edges each layer computes depends on the engine:

- ``pyg``: PyG's layers run on the whole sampled subgraph at every layer (every node, every sampled edge), as
  ``NeighborLoader`` batches are used without trimming (PyG's ``trim_to_layer`` is opt-in);
- ``dgl``: DGL's message-flow graphs: the layer ``k``-th from the input computes only the nodes within ``L - k``
  hops of the seeds, over the edges sampled for them (DGL's ``to_block``: Wang et al., arXiv 1909.01315, Sec. 3.3);
- full-graph training: every node and every (directed) edge at every layer.

A layer ``a -> b`` over ``n`` output nodes and ``m`` edges: SAGEConv's two linear maps ``2 * 2 n a b`` FLOPs,
GCNConv's one ``2 n a b`` (PyG ``SAGEConv``/``GCNConv``), at the accelerator's fp32 peak (PyTorch runs fp32 GEMMs
without TF32 by default: ``torch.backends.cuda.matmul.allow_tf32 = False``), and the neighbour aggregation, a gather
and scatter-add of ``m`` rows of width ``a`` (SAGE) or ``b`` (GCN) and a write of the output, in HBM; the backward
pass twice the forward (one GEMM for the inputs' gradient, one for the weights': Kaplan et al., arXiv 2001.08361,
Sec. 2.1).

Memory: each layer keeps its input, aggregation and output (``n (a + a + b)`` fp32 values) for the backward pass;
the parameters with their gradients and Adam's two moments take 16 bytes each.
"""

from __future__ import annotations

from typing import Literal

from plait.cost.gnn_sampling import SampledBatch
from plait.workload.gnn import FEATURE_BYTES, GnnSpec

Engine = Literal["pyg", "dgl"]
ENGINES: tuple[Engine, ...] = ("pyg", "dgl")
ADAM_STATE_BYTES = 16
"""fp32 parameter, gradient and Adam's two moments."""


def layer_sizes(spec: GnnSpec, sampled: SampledBatch | None, engine: Engine) -> list[tuple[float, float]]:
    """(output nodes, edges) of each layer, input side first; ``sampled=None``: the whole graph."""
    layers = spec.model.layers
    if sampled is None:
        return [(float(spec.graph.nodes), 2.0 * spec.graph.edges)] * layers
    if engine == "pyg":
        return [(sampled.nodes, sampled.sampled_edges)] * layers
    return [(sampled.within(layers - k), sampled.edges[layers - k]) for k in range(1, layers + 1)]


def forward_s(spec: GnnSpec, sizes: list[tuple[float, float]], flops_per_s: float, hbm: float) -> float:
    """Forward time of every layer (module docstring)."""
    total = 0.0
    for (a, b), (n, m) in zip(spec.model.widths(spec.graph), sizes, strict=True):
        maps, width = (2, a) if spec.model.kind == "sage" else (1, b)
        total += maps * 2.0 * n * a * b / flops_per_s
        total += (2 * m * width + n * b) * FEATURE_BYTES / hbm  # gather and scatter-add the edges, write the output
    return total


def activation_bytes(spec: GnnSpec, sizes: list[tuple[float, float]]) -> float:
    return sum(n * (2 * a + b) for (a, b), (n, _) in zip(spec.model.widths(spec.graph), sizes, strict=True)) * FEATURE_BYTES


def state_bytes(spec: GnnSpec) -> float:
    return ADAM_STATE_BYTES * spec.model.params(spec.graph)
