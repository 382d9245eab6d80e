"""Per-step costs of GNN training beyond the layers' device work: the host's dispatch of eager operations
(plait.workloads.gnn.dispatch) and GIN layers (plait.workloads.gnn.compute)."""

from __future__ import annotations

import pytest

from plait.hardware.catalog import get_cluster
from plait.workloads.gnn.cost import estimate_gnn
from plait.workloads.gnn.dispatch import host_step_s, step_ops
from plait.workloads.gnn.model import GnnModel, GnnSpec, GraphStats

CORA = GraphStats(nodes=2708, edges=5278, features=1433, classes=7, train_nodes=140, degree_exponent=2.5,
                  max_degree=168)
"""Cora as PyG's Planetoid loads it: 2,708 nodes, 10,556 directed edges, 1,433 features, 7 classes, 140 training
nodes (https://pytorch-geometric.readthedocs.io/en/latest/generated/torch_geometric.datasets.Planetoid.html)."""


def test_a_step_dispatches_its_layers_loss_and_optimizer() -> None:
    """Hand-counted: 2 PyG SAGE layers (26 each), the loss (5), Adam and zero_grad over 6 tensors (9 each) = 111;
    fused layers 18 each = 95."""
    model = GnnModel(kind="sage", layers=2, hidden=16, fanouts=(1, 1))
    assert step_ops(model, "pyg") == 2 * 26 + 5 + 9 * 6
    assert step_ops(model, "spmm") == 2 * 18 + 5 + 9 * 6


def test_a_tiny_graphs_step_is_set_by_the_host() -> None:
    """The DGL 0.5 benchmark (dglai/dgl-0.5-benchmark README, V100) trains 2-layer GraphSAGE on Cora in 3.9 ms (DGL)
    and 2.6 ms (PyG) an epoch: far above its microseconds of device work, so the host's dispatch sets the step;
    plait's dispatch floor (10 us an operation) lies below both, as a floor must."""
    spec = GnnSpec(name="cora", graph=CORA, model=GnnModel(kind="sage", layers=2, hidden=16, fanouts=(1, 1)))
    est = estimate_gnn(spec, get_cluster("dgx1-v100"), 1, 1, "full_graph", library="spmm")
    assert est.host_s > est.device_s
    assert est.epoch_s == pytest.approx(host_step_s(spec.model, "spmm", get_cluster("dgx1-v100").accelerator))
    assert est.epoch_s < 2.6e-3


def test_without_a_launch_queue_the_hosts_dispatch_adds_to_the_device_work() -> None:
    """The same Cora step on a device that runs each op as the host issues it (a CPU,
    ``asynchronous_launch = false``): device work plus every operation's dispatch, not the longer of the two."""
    from dataclasses import replace

    spec = GnnSpec(name="cora", graph=CORA, model=GnnModel(kind="sage", layers=2, hidden=16, fanouts=(1, 1)))
    queued = get_cluster("dgx1-v100")
    inline = replace(queued, accelerator=replace(queued.accelerator, asynchronous_launch=False,
                                                 asynchronous_launch_source="assumed: a test's synchronous device"))
    est = estimate_gnn(spec, inline, 1, 1, "full_graph", library="spmm")
    assert est.step_s == pytest.approx(est.device_s + host_step_s(spec.model, "spmm", queued.accelerator))
    assert est.step_s > estimate_gnn(spec, queued, 1, 1, "full_graph", library="spmm").step_s


def test_gin_parameters_are_its_mlps() -> None:
    """Hand-counted: layers 16 -> 32 -> 4, each an MLP a -> b -> b with biases: (16*32 + 32 + 32*32 + 32) +
    (32*4 + 4 + 4*4 + 4)."""
    graph = GraphStats(nodes=10, edges=10, features=16, classes=4, train_nodes=10, degree_exponent=2.5, max_degree=5)
    model = GnnModel(kind="gin", layers=2, hidden=32, fanouts=(1, 1))
    assert model.params(graph) == (16 * 32 + 32 + 32 * 32 + 32) + (32 * 4 + 4 + 4 * 4 + 4)


@pytest.mark.parametrize("library, slower", [("pyg", True), ("pyg_sampler", True), ("dgl", False), ("spmm", False),
                                             ("pyg_sparse", False)])
def test_pytorchs_gather_rate_slows_pyg_on_a_described_gpu_only(library: str, slower: bool) -> None:
    """PyG's gather-scatter runs at TorchRec's rate for plain PyTorch lookups (half the HBM's) on a datasheet GPU;
    fused products (DGL, torch_sparse) and an accelerator plait calibrate measured keep their streaming rate."""
    from dataclasses import replace

    from plait.workloads.gnn.compute import layer_compute_s, layer_sizes

    acc = get_cluster("dgx1-v100").accelerator
    measured = replace(acc, source="measured by plait calibrate on 2026-12-06")
    spec = GnnSpec(name="c", graph=CORA, model=GnnModel(kind="sage", layers=2, hidden=64, fanouts=(1, 1)))
    sizes = layer_sizes(spec, None, library)  # type: ignore[arg-type]
    described = sum(layer_compute_s(spec, sizes, acc, library))  # type: ignore[arg-type]
    calibrated = sum(layer_compute_s(spec, sizes, measured, library))  # type: ignore[arg-type]
    assert (described > calibrated) if slower else described == pytest.approx(calibrated)


@pytest.mark.parametrize(("h", "sector_waste"), [(2, 6), (8, 0)])
def test_dgls_gatconv_traffic_kernel_by_kernel(h: int, sector_waste: int) -> None:
    """Hand-counted per edge for ``h`` heads and messages 8 wide (10 nodes, 100 edges): forward u_add_v 3h, leaky ReLU
    2h, the softmax's max h, subtraction 3h, exponent 2h, sum h and division 3h, the message product w + h (and w
    per node written; the softmax's max and sum h per node each); backward the product's gradients w + h and 2w + h
    (w per node written), the softmax's out * grad 3h, sum h, product 3h and subtraction 3h, the leaky ReLU's 3h and
    the logits' two sums h each (h per node written by each and by the softmax's sum); per node the logits el and er
    (a product 2w and a sum w + h apiece; backward the input's gradient w + h and the attention vector's 2w + h and
    w apiece, and the input's three gradient paths added twice, 3w each); 6 edge-walking kernels each
    way reading two int32 ids per edge (2 fp32 values' worth); 6 random h-wide reads per edge forward and 3 backward,
    each a whole 32-byte sector (8 fp32 values: 6 more than 2 heads, none more than 8)."""
    from plait.workloads.gnn.compute import aggregation_values

    n, m, w = 10, 100, 8
    forward = m * (3 * h + 2 * h + h + 3 * h + 2 * h + h + 3 * h + w + h) + n * (w + 2 * h) + m * 6 * 2
    backward = m * (w + h + 2 * w + h + 3 * h + h + 3 * h + 3 * h + 3 * h + 2 * h) + n * (w + 3 * h) + m * 6 * 2
    forward, backward = forward + 6 * sector_waste * m, backward + 3 * sector_waste * m
    forward += n * (2 * (2 * w + w + h))  # el and er: a product and a sum over each head's channels apiece
    backward += n * (2 * (w + h + 2 * w + h + w) + 2 * 3 * w)  # their gradients; three paths added twice
    assert aggregation_values("dgl", "gat", n, m, w, h) == pytest.approx((forward, backward))
    fused = aggregation_values("spmm", "gat", n, m, w, h)  # one fused product and a softmax of 8h: fewer passes
    assert fused[0] < forward and fused[1] < backward


@pytest.mark.parametrize(("library", "expected"), [("dgl", (1160, 1050)), ("spmm", (1160, 1050))])
def test_dgls_mean_is_a_sum_then_a_division_by_hand(library: str, expected: tuple[int, int]) -> None:
    """DGL's mean (python/dgl/ops/spmm.py: a sum product, then ``ret / clamp(in_degrees)``), 10 nodes, 100 edges,
    rows 8 wide: the product 110 x 8 = 880 values each way; forward the division 2 x 10 x 8 + 10 = 170 and the
    degree vector (in-degrees 40, clamp 40, cast 30: int64 = 2 fp32 values) 110; backward the division's gradient
    170."""
    from plait.workloads.gnn.compute import aggregation_values

    assert aggregation_values(library, "sage", 10, 100, 8) == pytest.approx(expected)  # type: ignore[arg-type]


@pytest.mark.parametrize(("nodes", "expected"), [(64, 10 * (56 + 28) + 4 * 65), (65, 10 * (56 + 2 * 28) + 4 * 66)])
def test_dgls_reversed_graph_csc_rebuild_bytes_by_hand(nodes: int, expected: int) -> None:
    """Rebuilding a 10-edge graph's CSC from its COO (DGL 0.6.1 COOSort + COOToCSR, int32 ids): per edge the clones
    of rows and columns 16 B, int64 positions 8, the columns gathered 16, the positions cast 12, the sorted rows read
    4 (56), and 28 per radix pass (keys read twice, positions read, both written) at 6 bits a pass: 64 nodes fit 6
    bits (one pass), 65 need 7 (two); 4 B of row offset per node and one more."""
    from plait.workloads.gnn.dgl_reverse import rebuild_bytes, reversals

    assert rebuild_bytes(nodes, 10) == expected
    assert (reversals("gat", 3, True), reversals("sage", 3, False), reversals("gcn", 2, True)) == (6, 2, 0)


def _added_layer_s(**change: bool) -> tuple[list[float], float]:
    """Per layer, what a 2-layer 64-wide GraphSAGE on Cora (V100) adds with ``change`` to its model, and the HBM rate."""
    from dataclasses import replace

    from plait.cost.compute import memory_bytes_per_s
    from plait.workloads.gnn.compute import layer_compute_s, layer_sizes

    acc = get_cluster("dgx1-v100").accelerator
    plain = GnnSpec(name="c", graph=CORA, model=GnnModel(kind="sage", layers=2, hidden=64, fanouts=(1, 1)))
    changed = replace(plain, model=replace(plain.model, **change))
    sizes = layer_sizes(plain, None, "spmm")
    extra = [b - a for a, b in zip(layer_compute_s(plain, sizes, acc, "spmm"),
                                   layer_compute_s(changed, sizes, acc, "spmm"), strict=True)]
    return extra, memory_bytes_per_s(acc)


def test_dropout_after_a_hidden_layer_streams_18_bytes_an_element_by_hand() -> None:
    """PyTorch's CUDA dropout (aten/src/ATen/native/cuda/Dropout.cu): forward reads the fp32 input (4 bytes) and
    writes the output (4) and a 1-byte mask; backward reads the gradient (4) and the mask (1) and writes the input's
    gradient (4): 18 bytes per element of the hidden layer's output (Cora's 2,708 nodes x 64), at the HBM's rate; the
    last layer has none."""
    extra, rate = _added_layer_s(dropout=True)
    assert extra[0] == pytest.approx(18 * 2708 * 64 / rate)
    assert extra[1] == 0.0


def test_a_hidden_layers_dropout_keeps_its_one_byte_mask_by_hand() -> None:
    """Dropout's backward reads the mask its forward wrote (1 byte an element, Dropout.cu): a 2-layer model keeps
    2,708 x 64 bytes more with dropout after its hidden layer, and nothing more for the last layer."""
    from dataclasses import replace

    from plait.workloads.gnn.compute import activation_bytes, layer_sizes

    plain = GnnSpec(name="c", graph=CORA, model=GnnModel(kind="sage", layers=2, hidden=64, fanouts=(1, 1)))
    dropped = replace(plain, model=replace(plain.model, dropout=True))
    sizes = layer_sizes(plain, None, "spmm")
    assert activation_bytes(dropped, sizes) - activation_bytes(plain, sizes) == 2708 * 64
    assert activation_bytes(dropped, sizes, 1) == activation_bytes(plain, sizes, 1)


def test_batch_norm_before_a_hidden_layers_activation_streams_32_bytes_an_element_by_hand() -> None:
    """PyTorch's CUDA BatchNorm1d on a 2-D input (Normalization.cu): forward reads the fp32 input for the statistics,
    then reads it and writes the output (12 bytes); backward reads the input and the output's gradient for the sums,
    then both again and writes the input's gradient (20 bytes): 32 bytes per element of the hidden output."""
    extra, rate = _added_layer_s(batch_norm=True)
    assert extra[0] == pytest.approx(32 * 2708 * 64 / rate)
    assert extra[1] == 0.0


@pytest.mark.parametrize(("feature_bytes", "bytes_per_value"), [(2, 6), (4, 0)])
def test_fp16_input_rows_are_cast_to_fp32_on_the_gpu_by_hand(feature_bytes: int, bytes_per_value: int) -> None:
    """SALIENT's models open with ``x.to(torch.float)``: Cora's 2,708 x 1,433 fp16 rows are read (2 bytes) and written
    as fp32 (4 bytes) once at the HBM's rate; fp32 rows are not cast."""
    from plait.cost.compute import memory_bytes_per_s
    from plait.workloads.gnn.compute import input_cast_s

    acc = get_cluster("dgx1-v100").accelerator
    cast_s = input_cast_s(2708, 1433, feature_bytes, acc)
    assert cast_s == pytest.approx(bytes_per_value * 2708 * 1433 / memory_bytes_per_s(acc))


@pytest.mark.parametrize("width, lanes", [(64, 1.0), (16, 0.5)])
def test_a_torch_sparse_product_runs_at_the_published_row_split_rate(width: int, lanes: float) -> None:
    """Yang, Buluc and Owens (Euro-Par 2018, merge-spmm result/Figure6_row.txt): matrices of 8-16 non-zeros a row
    (median 12.85) multiply at a median 0.388 of the K40c's 288 GB/s, counted as (nnz + rows) x 64 fp32 values; on a
    V100 (900 GB/s) 100k rows of 12.85 non-zeros then take (1.285M + 100k) x 64 x 4 B / (0.388 x 900 GB/s). A width
    of 16 fills half of each warp's 32 column lanes."""
    from plait.workloads.gnn.sparse_tensor import product_s

    acc = get_cluster("dgx1-v100").accelerator
    expected = (12.85e5 + 1e5) * width * 4 / (0.388 * 900e9 * lanes)
    assert product_s(12.85e5, 1e5, width, acc) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("kind, fused", [("sage", True), ("gcn", True), ("gin", True), ("gat", False)])
def test_pyg_on_a_sparse_tensor_fuses_all_but_attention(kind: str, fused: bool) -> None:
    """PyG's SAGEConv, GCNConv and GINConv define message_and_aggregate (torch_sparse's matmul on a SparseTensor);
    GATConv does not, so on a SparseTensor it gathers and scatters as on an edge_index: its layers and its host's
    operations are PyG's NeighborSampler's."""
    from plait.workloads.gnn.compute import layer_compute_s, layer_sizes

    acc = get_cluster("dgx1-v100").accelerator
    model = GnnModel(kind=kind, layers=2, hidden=64, fanouts=(1, 1), heads=2 if kind == "gat" else 1)  # type: ignore[arg-type]
    spec = GnnSpec(name="c", graph=CORA, model=model)
    sizes = layer_sizes(spec, None, "pyg_sparse")
    same = layer_compute_s(spec, sizes, acc, "pyg_sparse") == layer_compute_s(spec, sizes, acc, "pyg_sampler")
    assert same is not fused
    assert step_ops(model, "pyg_sparse") == step_ops(model, "spmm" if fused else "pyg_sampler")
