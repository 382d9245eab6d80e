"""The layers' time and the memory of one GNN step on one GPU (issue 18; :mod:`plait.cost.gnn`).

Which nodes and edges each layer computes depends on the engine:

- ``pyg``: PyG's layers run on the whole sampled subgraph at every layer (every node, every sampled edge), as
  ``NeighborLoader`` batches are used without trimming (PyG's ``trim_to_layer`` is opt-in);
- ``dgl``: DGL's message-flow graphs: the layer ``k``-th from the input computes only the nodes within ``L - k``
  hops of the seeds, over the edges sampled for them (DGL's ``to_block``: Wang et al., arXiv 1909.01315, Sec. 3.3);
- full-graph training: every node and every (directed) edge at every layer.

A layer ``a -> b`` over ``n`` output nodes and ``m`` edges: SAGEConv's two linear maps ``2 * 2 n a b`` FLOPs,
GCNConv's one ``2 n a b`` (PyG ``SAGEConv``/``GCNConv``), each an ``n x a`` by ``a x b`` product on the fp32 roofline
(the accelerator's fp32 GEMM curve by shape: :func:`plait.cost.compute.fp32_gemm_s`; PyTorch runs fp32 GEMMs without
TF32 by default: ``torch.backends.cuda.matmul.allow_tf32 = False``), and the memory-bound kernels, counted in fp32
values read plus written at the HBM's streaming rate:

- the neighbour aggregation of ``m`` rows into ``n``: DGL's fused sparse-dense product reads each edge's row once and
  writes each output once (``m + n`` rows each way); PyG's gather-scatter message passing
  (torch_geometric/nn/conv/message_passing.py, ``propagate`` on an ``edge_index``; ``torch.profiler`` lists these
  kernels in a SAGEConv step) gathers the messages (``index_select``: ``2m``), zeroes the output (``n``), scatter-adds
  the messages into it (``2m``) and divides by the degree (``2n``), ``4m + 3n`` rows; backward the same kernels in
  reverse (division, gather back to the edges, zeroed node gradients, scatter-add). GCNConv adds a self loop per node
  (``gcn_norm``) and scales each message by its edge weight (``2m`` more) but divides nothing: ``6m' + n`` rows,
  ``m' = m + n``, each way;
- the layer's output: SAGEConv adds its two maps' outputs (``3nb``), GCNConv its bias (``2nb``); a ReLU after every
  layer but the last (``2nb``; backward ``threshold_backward``, ``3nb``); backward, the bias gradient's sum over the
  rows (``nb``) and, below the first layer, the input gradient's two paths summed (``3na``).

The rows' width is where each engine aggregates:
PyG's SAGEConv aggregates the inputs (``a``) and its GCNConv the transformed outputs (``b``); DGL's SAGEConv and
GraphConv transform first whenever that narrows the messages (``min(a, b)``: dgl/nn/pytorch/conv/sageconv.py
``lin_before_mp``, graphconv.py "mult W first to reduce the feature size for aggregation"). Backward: each GEMM
twice over, as the inputs' gradient (``n x b`` by ``b x a``) and the weights' (``a x n`` by ``n x b``: Kaplan et
al., arXiv 2001.08361, Sec. 2.1), an aggregation once (its gradient is the transposed product, with no weights); the
first layer's input features take no gradient, so its GEMMs are costed once more only for the weights', and an
aggregation of the raw features not at all.

Memory: each layer keeps its input, aggregation and output (``n (a + a + b)`` fp32 values) for the backward pass;
the parameters with their gradients and Adam's two moments take 16 bytes each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from plait.cost.compute import fp32_gemm_s, memory_bytes_per_s
from plait.cost.gnn_sampling import SampledBatch
from plait.hardware.accelerator import Accelerator
from plait.workload.gnn import FEATURE_BYTES, GnnSpec, GraphStats

Engine = Literal["pyg", "dgl"]
ENGINES: tuple[Engine, ...] = ("pyg", "dgl")
ADAM_STATE_BYTES = 16
"""fp32 parameter, gradient and Adam's two moments."""
INDEX_BYTES = 8
"""int64 node ids, as PyG and plait's sampler keep them."""


@dataclass(frozen=True, kw_only=True)
class GnnEstimate:
    """One step of one rank, its parts in seconds, and the epoch."""

    strategy: str
    batch: SampledBatch | None
    """The expected sampled batch (``None`` for full-graph training)."""
    sampling_s: float
    fetch_s: float
    compute_s: float
    all_reduce_s: float
    optimizer_s: float
    fetch_bytes: float
    """What each rank sends its peers for features (all-to-all), or reads over PCIe (host features)."""
    memory_bytes: float
    steps_per_epoch: int
    correction_s: float = 0.0
    """LLCG: the server's correction steps, per local step."""

    @property
    def step_s(self) -> float:
        return self.sampling_s + self.fetch_s + self.compute_s + self.all_reduce_s + self.optimizer_s + self.correction_s

    @property
    def epoch_s(self) -> float:
        return self.step_s * self.steps_per_epoch


def structure_bytes(g: GraphStats) -> float:
    """The graph's CSR: ``N + 1`` int64 offsets and ``2E`` int64 neighbour ids."""
    return (g.nodes + 1 + 2 * g.edges) * INDEX_BYTES


def layer_sizes(spec: GnnSpec, sampled: SampledBatch | None, engine: Engine) -> list[tuple[float, float]]:
    """(output nodes, edges) of each layer, input side first; ``sampled=None``: the whole graph."""
    layers = spec.model.layers
    if sampled is None:
        return [(float(spec.graph.nodes), 2.0 * spec.graph.edges)] * layers
    if engine == "pyg":
        return [(sampled.nodes, sampled.sampled_edges)] * layers
    return [(sampled.within(layers - k), sampled.edges[layers - k]) for k in range(1, layers + 1)]


def step_compute_s(spec: GnnSpec, sizes: list[tuple[float, float]], acc: Accelerator, engine: Engine = "pyg") -> float:
    """Forward and backward time of every layer (module docstring)."""
    return sum(layer_compute_s(spec, sizes, acc, engine))


def layer_compute_s(spec: GnnSpec, sizes: list[tuple[float, float]], acc: Accelerator,
                    engine: Engine = "pyg") -> list[float]:
    """Forward and backward time of each layer, input side first: its GEMMs on the fp32 roofline and the values its
    aggregation and elementwise kernels stream through memory (module docstring)."""
    roof, hbm = fp32_gemm_s(acc), memory_bytes_per_s(acc)
    kind, layers = spec.model.kind, spec.model.layers
    maps = 2 if kind == "sage" else 1
    out = []
    for layer, ((a, b), (n, m)) in enumerate(zip(spec.model.widths(spec.graph), sizes, strict=True)):
        transform_first = a > b if engine == "dgl" else kind == "gcn"
        width = b if transform_first else a
        first, hidden = layer == 0, layer < layers - 1  # the input features need no gradient; ReLU after hidden ones
        gemms = roof.time_s(n, b, a) + roof.time_s(a, b, n) + (0.0 if first else roof.time_s(n, a, b))
        fwd, bwd = aggregation_values(engine, kind, n, m, width)
        if first and not transform_first:  # an aggregation of the raw features takes no gradient
            bwd = 0.0
        fwd += (3 if kind == "sage" else 2) * n * b + (2 * n * b if hidden else 0.0)
        bwd += n * b + (3 * n * b if hidden else 0.0) + (0.0 if first else 3 * n * a)
        out.append(maps * gemms + (fwd + bwd) * FEATURE_BYTES / hbm)
    return out


def aggregation_values(engine: Engine, kind: str, n: float, m: float, width: float) -> tuple[float, float]:
    """Values one layer's neighbour aggregation reads and writes, forward and backward (module docstring)."""
    if engine == "dgl":  # one fused sparse-dense product each way
        return (m + n) * width, (m + n) * width
    if kind == "gcn":  # gcn_norm's self loops; each message scaled by its edge weight, then summed
        m += n
        return (6 * m + n) * width, (6 * m + n) * width
    return (4 * m + 3 * n) * width, (4 * m + 3 * n) * width


def activation_bytes(spec: GnnSpec, sizes: list[tuple[float, float]], first: int = 0, stop: int | None = None) -> float:
    """What layers ``first .. stop - 1`` (all by default) keep for the backward pass (module docstring)."""
    widths = spec.model.widths(spec.graph)[first:stop]
    return sum(n * (2 * a + b) for (a, b), (n, _) in zip(widths, sizes[first:stop], strict=True)) * FEATURE_BYTES


def state_bytes(spec: GnnSpec) -> float:
    return ADAM_STATE_BYTES * spec.model.params(spec.graph)
