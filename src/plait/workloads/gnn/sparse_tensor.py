"""The neighbour aggregation of PyG layers run on a ``torch_sparse.SparseTensor`` adjacency (library ``pyg_sparse``).

PyG's ``MessagePassing.propagate`` fuses the message and its aggregation into the layer's ``message_and_aggregate``
whenever the adjacency is a ``SparseTensor`` and the layer defines one (torch_geometric/nn/conv/message_passing.py,
PyG 1.7-2.0: ``self.fuse = self.inspector.implements('message_and_aggregate')``): SAGEConv, GCNConv and GINConv do,
each calling torch_sparse's ``matmul(adj_t, x, reduce)``; GATConv does not, and gathers and scatters as on an
``edge_index`` (:data:`FUSED_KINDS`). That product is torch_sparse's CSR kernel (csrc/cuda/spmm_cuda.cu
``spmm_kernel``: one warp per output row, its lanes over 32 columns, a column tile per ``blockIdx.y``), whose
backward for the dense input runs the same kernel on the transposed matrix (csrc/spmm.cpp ``SPMMSum``/``SPMMMean``
backward: ``spmm_fw`` over ``colptr``, the rows being the source nodes).

Each product is costed as plait costs a fused one, ``(nnz + rows) width`` fp32 values (every non-zero's input row read
once, every output row written once), at the GPU's datasheet bandwidth times the kernel's rate at the product's mean
row length (``torch_sparse_spmm_relative`` of ``plait/hardware/data/kernels.toml``: Yang, Buluc and Owens, Euro-Par
2018, the paper the kernel cites, measured over 64 columns) times the share of its 32-lane column tiles the width
fills (``lane_idx < leftover``: a width of 16 leaves half of each warp idle). Below the shortest rows measured
(2.7 non-zeros) each row is taken to cost what a row there costs: a warp runs the same 32 unrolled steps for any row
of up to 32 non-zeros (``spmm_kernel``'s inner loop, predicated per lane), and the published times per row stay
within 26-36 times the streaming of one row from 2.7 to 21 non-zeros (benchmarks/spmm_row_split_curve.py). Forward: ``m`` non-zeros over the ``n``
output rows; backward: over the ``n_src`` source rows. GCNConv's product carries the self loops ``gcn_norm`` adds
(``m + n`` non-zeros); its normalization scales the ``m + n`` edge values (scalars, not counted).
"""

from __future__ import annotations

import math

from plait.hardware.accelerator import Accelerator
from plait.hardware.catalog import kernel_curve
from plait.workloads.gnn.model import FEATURE_BYTES

FUSED_KINDS = ("sage", "gcn", "gin")
"""Layers whose PyG class defines ``message_and_aggregate`` (module docstring)."""
WARP_COLUMNS = 32
"""Columns one warp of ``spmm_kernel`` covers (its lanes; ``blockIdx.y`` steps over tiles of 32)."""


def product_s(nonzeros: float, rows: float, width: float, acc: Accelerator) -> float:
    """Seconds of one torch_sparse product of a ``rows``-row sparse matrix with ``nonzeros`` entries and a dense
    matrix ``width`` columns wide (module docstring)."""
    if nonzeros <= 0 or rows <= 0:
        return 0.0
    curve, length = kernel_curve("torch_sparse_spmm_relative"), nonzeros / rows
    shortest = curve.sizes[0]  # below the shortest class measured: its time per row (module docstring)
    rate = curve.at(length) if length >= shortest else curve.fractions[0] * (length + 1) / (shortest + 1)
    lanes = width / (WARP_COLUMNS * math.ceil(width / WARP_COLUMNS))
    return (nonzeros + rows) * width * FEATURE_BYTES / (acc.memory_bandwidth_bytes_per_s * rate * lanes)


def aggregation_s(
    kind: str, n: float, m: float, sources: float, width: float, acc: Accelerator, backward: bool
) -> tuple[float, float]:
    """Forward and backward seconds of one layer's ``matmul(adj_t, x)`` over ``n`` outputs, ``m`` edges and
    ``sources`` input rows (no backward where the aggregated rows take no gradient)."""
    nonzeros = m + n if kind == "gcn" else m
    forward = product_s(nonzeros, n, width, acc)
    return forward, (product_s(nonzeros, sources, width, acc) if backward else 0.0)
