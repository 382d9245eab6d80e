"""The layers' time and the memory of one GNN step on one GPU (:mod:`plait.workloads.gnn.cost`).

Which nodes and edges each layer computes depends on the library:

- ``pyg``: PyG's layers run on the whole sampled subgraph at every layer (every node, every sampled edge), as
  ``NeighborLoader`` batches are used without trimming (PyG's ``trim_to_layer`` is opt-in);
- ``pyg_sampler``: PyG's older ``NeighborSampler`` (torch_geometric/loader/neighbor_sampler.py, PyG <= 2.0's loader
  of SALIENT's and GNNLab's PyG scripts) returns one bipartite ``adjs`` entry per layer, each hop drawing for every
  node reached so far (``adj_t.sample_adj(n_id, size)``), and the model computes layer ``k`` on ``x[:size[1]]``: the
  nodes and edges of DGL's message-flow graphs below, with PyG's gather-scatter kernels;
- ``pyg_sparse``: the same loader over a ``torch_sparse.SparseTensor`` graph (SALIENT's and GNNLab's PyG scripts):
  SAGEConv, GCNConv and GINConv aggregate through torch_sparse's fused product at its measured rate
  (:mod:`plait.workloads.gnn.sparse_tensor`), GATConv gathers and scatters as ``pyg_sampler``;
- ``spmm``: one fused sparse-dense product of the adjacency and the layer's inputs, as DGL's
  ``update_all(copy_src, mean)`` on the raw inputs does (the DGL 0.5 benchmark's own DGL SAGEConv module:
  dglai/dgl-0.5-benchmark end_to_end/full_graph/node_classification/main_dgl_*_sage.py; its PyG twin's
  ``SparseTensor.matmul(x, reduce="mean")`` is ``pyg_sparse``); the nodes and edges as DGL's. DGL's ``mean`` (here
  and in ``dgl``'s SAGEConv) is a ``sum`` product, then a division by the in-degrees (:mod:`plait.workloads.gnn.dgl_mean`);
- ``dgl``: DGL's message-flow graphs: the layer ``k``-th from the input computes only the nodes within ``L - k``
  hops of the seeds, over the edges sampled for them (DGL's ``to_block``: Wang et al., arXiv 1909.01315, Sec. 3.3);
- full-graph training: every node and every (directed) edge at every layer.

A layer ``a -> b`` over ``n`` output nodes and ``m`` edges: SAGEConv's two linear maps ``2 * 2 n a b`` FLOPs,
GCNConv's one ``2 n a b`` (PyG ``SAGEConv``/``GCNConv``), GATConv's one and TransformerConv's query, key and value
maps to the heads' width ``w`` and its skip map to ``b`` (``w = b`` but on an attention model's last layer, whose
``h`` heads of ``b`` channels are averaged: ``w = h b``), each an ``n x a`` by ``a x w`` product on the fp32 roofline
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
- attention layers (``h`` heads, messages of the maps' width ``w``): GATConv (Velickovic et al., ICLR 2018, Eq. 1-4;
  PyG ``GATConv``) adds self loops (``m' = m + n``), takes each node's two attention logits (a product with the
  attention vector and a sum over channels, ``3n`` rows each), gathers each edge's message (``2m'``), scales it by
  the edge softmax (``2m'``) and scatter-adds it (``2m'``, ``n`` zeroed): ``6m' + 7n`` rows; backward the scatter's
  gather (``2m'``), the message's two gradients (``2m'`` scaled, ``4m'`` multiplied and summed over channels for the
  attention's), the gather's scatter-add (``2m'``, ``n`` zeroed) and the logits' products, sums and the paths'
  additions over the nodes (``16n``): ``10m' + 17n`` rows (the kernels ``torch.profiler`` lists in a GATConv step);
  TransformerConv (Shi et al., IJCAI 2021, Eq. 3-5; PyG ``TransformerConv``) gathers each edge's query and key (``4m``), takes their product (``3m``), gathers the value
  (``2m``), scales it (``3m``) and scatter-adds it (``2m``, and ``n`` zeroed): ``14m + n`` rows; the edge softmax
  (PyG ``utils.softmax``: a scatter-max, a subtraction, an exponent, a scatter-sum and a division over ``h`` values
  per edge) ``8h (m + n)`` values each way. These are the graph transformer's sparse attention (000-08: attention
  restricted to the graph's edges). DGL's GATConv runs edge-wise kernels kernel by kernel
  (:mod:`plait.workloads.gnn.dgl_gat`);
- GINConv (Xu et al., ICLR 2019, Eq. 4.1; PyG ``GINConv`` with a two-layer MLP, PyG's ``GIN`` model) sums the
  gathered inputs (``index_select`` ``2m``, a zeroed output ``n``, ``scatter_add`` ``2m``), adds ``(1 + eps) x``
  (``3n``), and runs its MLP ``a -> b -> b``: the inner bias and ReLU ``4nb`` (backward ``3nb``), and it keeps the
  inner map's output and ReLU (``2nb``) for the backward pass;
- the layer's output: SAGEConv adds its two maps' outputs (``3nb``), TransformerConv its skip map's (``3nb``), GCNConv
  and GATConv a bias (``2nb``); an attention model's last layer averages its heads (``n (w + b)``); a ReLU after every
  layer but the last (``2nb``; backward ``threshold_backward``, ``3nb``) and, where the model has them
  (:class:`plait.workloads.gnn.model.GnnModel`), a dropout after that ReLU (``2.25 nb`` each way:
  :data:`DROPOUT_VALUES`) and a batch normalization before it (``3nb`` forward, ``5nb`` backward:
  :mod:`plait.workloads.gnn.batch_norm`: the larger of these values' time and, for PyTorch 1.8's kernels above
  cuDNN's row limit, their latency-bound time); backward, the bias gradient's sum over the rows (``nb``) and, below
  the first layer, the input gradient's paths summed, one per linear map after the first (``3na`` each).

PyG's gather-scatter values stream at the rate of PyTorch's own gather and scatter kernels over random rows,
``torch_gather_relative`` of the HBM's (TorchRec's planner: plain PyTorch embedding lookups at half the rate of
FBGEMM's fused kernel; ``plait/hardware/data/kernels.toml``) on a described GPU; on an accelerator ``plait
calibrate`` measured, at its measured rate. DGL's and torch_sparse's fused products stream at the HBM's rate.

The rows' width is where each library aggregates:
PyG's SAGEConv aggregates the inputs (``a``) and its GCNConv the transformed outputs (``b``); DGL's SAGEConv and
GraphConv transform first whenever that narrows the messages (``min(a, b)``: dgl/nn/pytorch/conv/sageconv.py
``lin_before_mp``, graphconv.py "mult W first to reduce the feature size for aggregation"). Backward: each GEMM
twice over, as the inputs' gradient (``n x b`` by ``b x a``) and the weights' (``a x n`` by ``n x b``: Kaplan et
al., arXiv 2001.08361, Sec. 2.1), an aggregation once (its gradient is the transposed product, with no weights); the
first layer's input features take no gradient, so its GEMMs are costed once more only for the weights', and an
aggregation of the raw features not at all.

Memory: each layer keeps its input, aggregation and output (``n (a + a + b)`` fp32 values) for the backward pass,
and the per-edge values its products need: GCNConv's messages (``m' b``), GATConv's messages and attention
(``m' (w + h)``), TransformerConv's gathered queries, keys and values and attention (``m (3w + h)``), a hidden
layer's dropout its mask (``nb`` bytes) and its batch normalization its output (``nb`` values); the parameters with their gradients and Adam's two moments take 16 bytes each.
"""

from __future__ import annotations

from typing import Literal

from plait.cost.compute import fp32_gemm_s, memory_bytes_per_s
from plait.hardware.accelerator import Accelerator
from plait.hardware.catalog import kernel_curve
from plait.workloads.gnn.batch_norm import BATCH_NORM_VALUES, per_channel_latency_s, takes_per_channel_path
from plait.workloads.gnn.dgl_gat import dgl_gat_values
from plait.workloads.gnn.dgl_mean import dgl_mean_values
from plait.workloads.gnn.model import FEATURE_BYTES, GnnSpec, GraphStats
from plait.workloads.gnn.sampling import SampledBatch
from plait.workloads.gnn.sparse_tensor import FUSED_KINDS, aggregation_s

GnnLibrary = Literal["pyg", "dgl", "pyg_sampler", "pyg_sparse", "spmm"]
LIBRARIES: tuple[GnnLibrary, ...] = ("pyg", "dgl", "pyg_sampler", "pyg_sparse", "spmm")
ADAM_STATE_BYTES = 16
"""fp32 parameter, gradient and Adam's two moments."""
INDEX_BYTES = 8
"""int64 node ids, as PyG and plait's sampler keep them."""
MASK_BYTES = 1
"""Bytes per element of dropout's keep mask: PyTorch's CUDA ``fused_dropout`` writes a ``uint8`` (1.8-1.10) or
``bool`` mask (aten/src/ATen/native/cuda/Dropout.cu, ``fused_dropout_kernel``'s ``mask_t``)."""
DROPOUT_VALUES = 2 + MASK_BYTES / FEATURE_BYTES
"""fp32 values one dropout streams per element, each way: forward ``fused_dropout_kernel`` reads the input and writes
the scaled output and the mask; backward ``masked_scale_kernel`` reads the gradient and the mask and writes the
input's gradient (aten/src/ATen/native/cuda/Dropout.cu)."""
CALIBRATED = "measured by plait calibrate"
"""How a measured accelerator's source begins: its memory figure was timed on the host's own memory-bound operations,
so PyTorch's gather rate relative to a datasheet's streaming rate does not apply to it."""


def structure_bytes(g: GraphStats) -> float:
    """The graph's CSR: ``N + 1`` int64 offsets and an int64 neighbour id per stored edge (``2E`` undirected)."""
    return (g.nodes + 1 + g.stored_edges) * INDEX_BYTES


def layer_sizes(spec: GnnSpec, sampled: SampledBatch | None, library: GnnLibrary) -> list[tuple[float, float]]:
    """(output nodes, edges) of each layer, input side first; ``sampled=None``: the whole graph."""
    layers = spec.model.layers
    if sampled is None:
        return [(float(spec.graph.nodes), float(spec.graph.stored_edges))] * layers
    if library == "pyg":
        return [(sampled.nodes, sampled.sampled_edges)] * layers
    return [(sampled.within(layers - k), sampled.edges[layers - k]) for k in range(1, layers + 1)]


def step_compute_s(spec: GnnSpec, sizes: list[tuple[float, float]], acc: Accelerator, library: GnnLibrary = "pyg",
                   first_sources: float | None = None) -> float:
    """Forward and backward time of every layer (module docstring)."""
    return sum(layer_compute_s(spec, sizes, acc, library, first_sources))


def layer_compute_s(spec: GnnSpec, sizes: list[tuple[float, float]], acc: Accelerator,
                    library: GnnLibrary = "pyg", first_sources: float | None = None) -> list[float]:
    """Forward and backward time of each layer, input side first: its GEMMs on the fp32 roofline and the values its
    aggregation and elementwise kernels stream through memory (module docstring). ``first_sources``: the input
    layer's source nodes (the batch's nodes; by default its outputs, as in full-graph training), whose count sets
    the rows of a ``pyg_sparse`` layer's backward product (each later layer's are the previous layer's outputs)."""
    roof, hbm = fp32_gemm_s(acc), memory_bytes_per_s(acc)
    gather = 1.0 if acc.source.startswith(CALIBRATED) else kernel_curve("torch_gather_relative").value
    model = spec.model
    out = []
    for layer, ((a, b), w, (n, m)) in enumerate(zip(model.widths(spec.graph), model.mapped_widths(spec.graph), sizes,
                                                   strict=True)):
        first, hidden = layer == 0, layer < model.layers - 1  # the input features need no gradient; ReLU after hidden
        gemms = sum(roof.time_s(n, c, i) + roof.time_s(i, c, n) + (0.0 if first and i == a else roof.time_s(n, i, c))
                    for i, c in _map_shapes(model.kind, a, b, w))
        width, transform_first = _aggregated_width(model.kind, library, a, b, w)
        fused = library == "pyg_sparse" and model.kind in FUSED_KINDS  # torch_sparse's product, timed apart
        sources = sizes[layer - 1][0] if layer else first_sources or n
        product = aggregation_s(model.kind, n, m, sources, width, acc, not first or transform_first) if fused else ()
        fwd, bwd = aggregation_values(library, model.kind, n, m, width, model.heads) if not fused else (0.0, 0.0)
        if fused and model.kind == "gin":  # GINConv's (1 + eps) x + the product, each way
            fwd, bwd = 3 * n * width, 3 * n * width
        if first and not transform_first:  # an aggregation of the raw features takes no gradient
            bwd = 0.0
        if library in ("pyg", "pyg_sampler", "pyg_sparse") and not fused:  # PyTorch's gather and scatter kernels
            fwd, bwd = fwd / gather, bwd / gather  # at their rate over random rows
        fwd += (3 if model.kind in ("sage", "transformer") else 2) * n * b + (2 * n * b if hidden else 0.0)
        if hidden and model.dropout:  # dropout after the activation, forward and backward
            fwd, bwd = fwd + DROPOUT_VALUES * n * b, bwd + DROPOUT_VALUES * n * b
        norm_s = 0.0
        if hidden and model.batch_norm:  # batch normalization before the activation: streamed, or latency-bound
            bound = per_channel_latency_s(n, b, acc) if takes_per_channel_path(model.batch_norm_kernels, n) else (0, 0)
            norm_s = sum(max(v * n * b * FEATURE_BYTES / hbm, s) for v, s in zip(BATCH_NORM_VALUES, bound, strict=True))
        if model.kind == "gin":  # the MLP's inner bias and ReLU (2nb + 2nb; backward 3nb)
            fwd, bwd = fwd + 4 * n * b, bwd + 3 * n * b
        fwd += n * (w + b) if w != b else 0.0  # an attention model's last heads averaged
        bwd += n * b + (3 * n * b if hidden else 0.0) + (0.0 if first else 3 * (model.maps - 1) * n * a)
        out.append(gemms + sum(product) + norm_s + (fwd + bwd) * FEATURE_BYTES / hbm)
    return out


def _map_shapes(kind: str, a: int, b: int, w: int) -> tuple[tuple[int, int], ...]:
    """(input, output) widths of a layer's linear maps (:attr:`plait.workloads.gnn.model.GnnModel.maps`)."""
    return {"sage": ((a, b), (a, b)), "gcn": ((a, b),), "gat": ((a, w),), "transformer": ((a, w),) * 3 + ((a, b),),
            "gin": ((a, b), (b, b))}[kind]


def _aggregated_width(kind: str, library: GnnLibrary, a: int, b: int, w: int) -> tuple[int, bool]:
    """The width of the rows a layer aggregates, and whether they are its maps' outputs (module docstring)."""
    if kind in ("gat", "transformer"):
        return w, True
    if kind == "gin":  # GINConv sums the inputs and runs its MLP after (PyG and DGL alike)
        return a, False
    transform_first = a > b if library == "dgl" else kind == "gcn"
    return (b if transform_first else a), transform_first


def aggregation_values(library: GnnLibrary, kind: str, n: float, m: float, width: float,
                       heads: int = 1) -> tuple[float, float]:
    """Values one layer's neighbour aggregation reads and writes, forward and backward (module docstring)."""
    softmax = 8 * heads * (m + n) if kind in ("gat", "transformer") else 0.0  # the edge softmax's passes
    if library == "dgl" and kind == "gat":  # DGL's GATConv kernel by kernel
        return dgl_gat_values(n, m, width, heads)
    if library in ("dgl", "spmm"):  # one fused sparse-dense product each way
        # an attention layer's edge weights take a gradient too: DGL's GSpMM backward of u_mul_e_sum runs an SDDMM
        # 'dot' of each edge's source row and destination gradient row (2m rows read, m x heads written;
        # dmlc/dgl python/dgl/backend/pytorch/sparse.py, GSpMM.backward, `gsddmm(gidx, 'dot', X, dZ)`)
        weights = 2 * m * width + m * heads if kind in ("gat", "transformer") else 0.0
        mean = dgl_mean_values(n, width) if kind == "sage" else (0.0, 0.0)  # DGL's mean: a sum, then a division
        return (m + n) * width + softmax + mean[0], (m + n) * width + softmax + weights + mean[1]
    if kind == "gin":  # the sum of the gathered neighbours, then (1 + eps) x + the sum (3n)
        return (4 * m + 4 * n) * width, (4 * m + 4 * n) * width
    if kind == "gcn":  # gcn_norm's self loops: each message scaled by its edge weight, then summed
        m += n
        return (6 * m + n) * width, (6 * m + n) * width
    if kind == "gat":  # self loops; the nodes' attention logits, each message gathered, scaled and summed
        m += n
        return (6 * m + 7 * n) * width + softmax, (10 * m + 17 * n) * width + softmax
    if kind == "transformer":  # queries and keys gathered per edge and multiplied, values gathered, scaled, summed
        return (14 * m + n) * width + softmax, (14 * m + n) * width + softmax
    return (4 * m + 3 * n) * width, (4 * m + 3 * n) * width


def activation_bytes(spec: GnnSpec, sizes: list[tuple[float, float]], first: int = 0, stop: int | None = None) -> float:
    """What layers ``first .. stop - 1`` (all by default) keep for the backward pass (module docstring)."""
    model = spec.model
    layers = list(enumerate(zip(model.widths(spec.graph), model.mapped_widths(spec.graph), sizes,
                                strict=True)))[first:stop]
    kept, masks = 0.0, 0.0
    for layer, ((a, b), w, (n, m)) in layers:
        kept += n * (2 * a + b)
        kept += {"sage": 0.0, "gcn": (m + n) * b, "gat": (m + n) * (w + model.heads),
                 "transformer": m * (3 * w + model.heads), "gin": 2 * n * b}[model.kind]
        hidden = layer < model.layers - 1
        masks += n * b if model.dropout and hidden else 0.0
        kept += n * b if model.batch_norm and hidden else 0.0
    return kept * FEATURE_BYTES + masks * MASK_BYTES


def state_bytes(spec: GnnSpec) -> float:
    return ADAM_STATE_BYTES * spec.model.params(spec.graph)


def input_cast_s(nodes: float, features: int, feature_bytes: int, acc: Accelerator) -> float:
    """Seconds a model takes to cast a batch's ``nodes x features`` input rows, stored at ``feature_bytes`` bytes a
    value, to fp32 on the GPU (``x.to(torch.float)``, SALIENT's ``driver/models.py``: one elementwise kernel that reads
    ``feature_bytes`` and writes 4 bytes a value, at the HBM's rate); none for rows already fp32."""
    if feature_bytes >= FEATURE_BYTES:
        return 0.0
    return nodes * features * (feature_bytes + FEATURE_BYTES) / memory_bytes_per_s(acc)
