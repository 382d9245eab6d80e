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
and sum of ``m`` rows into ``n``, in HBM: DGL's fused sparse-dense product reads each edge's row once and writes each
output once (``m + n`` rows), PyG's gather-scatter message passing writes each message and reads it back
(``3m + n``: torch_geometric/nn/conv/message_passing.py, ``propagate`` on an ``edge_index``). The rows' width is where
each engine aggregates:
PyG's SAGEConv aggregates the inputs (``a``) and its GCNConv the transformed outputs (``b``); DGL's SAGEConv and
GraphConv transform first whenever that narrows the messages (``min(a, b)``: dgl/nn/pytorch/conv/sageconv.py
``lin_before_mp``, graphconv.py "mult W first to reduce the feature size for aggregation"). Backward: each GEMM
twice over (the inputs' gradient and the weights': Kaplan et al., arXiv 2001.08361, Sec. 2.1), an aggregation once
(its gradient is the transposed product, with no weights); the first layer's input features take no gradient, so
its GEMMs are costed once more only for the weights', and an aggregation of the raw features not at all.

Memory: each layer keeps its input, aggregation and output (``n (a + a + b)`` fp32 values) for the backward pass;
the parameters with their gradients and Adam's two moments take 16 bytes each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from plait.cost.gnn_sampling import SampledBatch
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


def step_compute_s(spec: GnnSpec, sizes: list[tuple[float, float]], flops_per_s: float, hbm: float,
                   engine: Engine = "pyg") -> float:
    """Forward and backward time of every layer (module docstring)."""
    return sum(layer_compute_s(spec, sizes, flops_per_s, hbm, engine))


def layer_compute_s(spec: GnnSpec, sizes: list[tuple[float, float]], flops_per_s: float, hbm: float,
                    engine: Engine = "pyg") -> list[float]:
    """Forward and backward time of each layer, input side first."""
    out = []
    for layer, ((a, b), (n, m)) in enumerate(zip(spec.model.widths(spec.graph), sizes, strict=True)):
        maps = 2 if spec.model.kind == "sage" else 1
        transform_first = a > b if engine == "dgl" else spec.model.kind == "gcn"
        width = b if transform_first else a
        gemm = maps * 2.0 * n * a * b / flops_per_s
        rows = m + n if engine == "dgl" else 3 * m + n
        aggregate = rows * width * FEATURE_BYTES / hbm
        first = layer == 0  # the input features need no gradient
        out.append(gemm * (2.0 if first else 3.0) + aggregate * (1.0 if first and not transform_first else 2.0))
    return out


def activation_bytes(spec: GnnSpec, sizes: list[tuple[float, float]], first: int = 0, stop: int | None = None) -> float:
    """What layers ``first .. stop - 1`` (all by default) keep for the backward pass (module docstring)."""
    widths = spec.model.widths(spec.graph)[first:stop]
    return sum(n * (2 * a + b) for (a, b), (n, _) in zip(widths, sizes[first:stop], strict=True)) * FEATURE_BYTES


def state_bytes(spec: GnnSpec) -> float:
    return ADAM_STATE_BYTES * spec.model.params(spec.graph)
