"""What DGL 0.6-0.7's backward pays on a whole graph held as COO to reverse it: each call rebuilds the reversed graph's
CSC, a GPU sort of every edge (full-graph training with the ``dgl`` or ``spmm`` library of a script whose graph holds
its COO: :attr:`plait.workloads.gnn.loop.GnnLoop.graph_formats`; charged by
:func:`plait.workloads.gnn.pipe.full_graph`).

- **The reversals.** The backward of a sparse operation that reads source rows reverses the graph: ``GSpMM``'s
  gradient of its source input and ``GSDDMM``'s of a ``u`` operand call ``gidx.reverse()``
  (dmlc/dgl python/dgl/backend/pytorch/sparse.py at 0.6.1, lines 98 and 161). A SAGEConv layer whose aggregated rows
  take a gradient reverses once (the product ``copy_u``); a GATConv layer twice (the product ``u_mul_e`` of ``ft``,
  a linear map's output, and the logits' ``u_add_v``); the softmax and the destination-side gradients do not.
- **The rebuild.** The reversed graph's CSC is the original's CSR (src/graph/unit_graph.cc ``UnitGraph::Reverse``,
  line 1620), which nothing in these layers creates (the forward product and ``in_degrees`` use the CSC, the SDDMMs
  the COO). A graph built from an edge list holds its COO (ogb's ``DglNodePropPredDataset`` builds
  ``dgl.graph((src, dst))``, DGL's ``RedditDataset`` ``from_scipy(coo_adj)``; assumed: DGL's ``save_graphs`` and
  ``load_graphs`` cache keeps that format, ``UnitGraph::Save`` writing a created one; ``to_bidirected``,
  ``add_self_loop``, ``.int()`` and ``.to(device)`` keep it; a script's ``g.formats(['csr', 'csc'])`` drops it,
  the ``graph_formats`` column of ``gnn_epochs.csv``), so ``GetInCSR`` converts the transposed COO (line 1315: it prefers the
  COO), whose flags ``COOTranspose`` leaves unsorted (src/array/array.cc line 634), and ``COOToCSR`` sorts it first
  (src/array/cuda/coo2csr.cu; include/dgl/aten/coo.h ``COOSort``), at every call: the reversed graph does not outlive
  it.
- **Its bytes, per edge (int32 ids):** ``COOSort`` clones the rows and columns (16); ``Sort`` (src/array/cuda/
  array_sort.cu) writes int64 positions (8) and radix-sorts the rows with them, ``ceil(bits / 6)`` passes over the
  ``bits`` of the largest row id (CUB's tuning for compute capability 7.0, cub/device/dispatch/dispatch_radix_sort.cuh
  ``Policy700``: ``PRIMARY_RADIX_BITS`` 6), each reading the keys twice and the positions once and writing both (28);
  then the columns gathered by the positions (16), the positions cast to int32 (12) and ``cusparseXcoo2csr`` reading
  the sorted rows (4), and a row offset per node (4). All at the HBM's streaming rate, a lower bound: each temporary
  is a ``cudaMalloc`` and ``cudaFree`` in DGL 0.6.1 (src/runtime/cuda/cuda_device_api.cc), whose synchronizations
  are not costed.
"""

from __future__ import annotations

import math

from plait.cost.compute import memory_bytes_per_s
from plait.hardware.accelerator import Accelerator
from plait.workloads.gnn.model import GnnSpec

REVERSALS_PER_LAYER = {"sage": 1, "gat": 2}
"""Graph reversals one layer's backward makes when its aggregated rows take a gradient (module docstring)."""
RADIX_BITS_PER_PASS = 6
"""CUB's radix sort digit on compute capability 7.0 (``Policy700``'s ``PRIMARY_RADIX_BITS``)."""
PASS_BYTES_PER_EDGE = 4 + 4 + 8 + 4 + 8
"""One sorting pass: the upsweep reads the int32 keys; the downsweep reads them and the int64 positions and writes
both."""
FIXED_BYTES_PER_EDGE = 16 + 8 + 16 + 12 + 4
"""The clones of rows and columns, the positions written, the columns gathered, the positions cast, the rows read by
``cusparseXcoo2csr`` (module docstring)."""
OFFSET_BYTES = 4
"""An int32 row offset per node, written by ``cusparseXcoo2csr``."""


def rebuild_bytes(nodes: float, edges: float) -> float:
    """Bytes one rebuild of a ``nodes``-node, ``edges``-edge graph's CSC from its COO streams (module docstring)."""
    passes = math.ceil(max(1, math.ceil(math.log2(max(nodes, 2)))) / RADIX_BITS_PER_PASS)
    return edges * (FIXED_BYTES_PER_EDGE + PASS_BYTES_PER_EDGE * passes) + OFFSET_BYTES * (nodes + 1)


def reversals(kind: str, layers: int, first_takes_gradient: bool) -> int:
    """Graph reversals of one step's backward: :data:`REVERSALS_PER_LAYER` for every layer whose aggregated rows take
    a gradient (all but the first where it aggregates the raw inputs); none for other kinds (not read)."""
    return REVERSALS_PER_LAYER.get(kind, 0) * (layers - (0 if first_takes_gradient else 1))


REVERSING_LIBRARIES = ("dgl", "spmm")
"""Libraries whose sparse backward reverses the graph: DGL's own layers, and the DGL 0.5 benchmark's SAGEConv modules
whose fused product is DGL's ``GSpMM`` (:mod:`plait.workloads.gnn.compute`)."""


def reversals_s(spec: GnnSpec, library: str, acc: Accelerator, first: int = 0, last: int | None = None) -> float:
    """Seconds layers ``first`` to ``last`` (exclusive; all by default) of a full-graph step spend rebuilding the
    reversed graph's CSC in their backward: none unless the library reverses and the script's graph holds its COO
    (:attr:`plait.workloads.gnn.loop.GnnLoop.graph_formats`); DGL's own SAGEConv modules aggregate the raw inputs at
    the first layer, which takes no gradient."""
    if library not in REVERSING_LIBRARIES or spec.loop.graph_formats != "coo":
        return 0.0
    kind, g = spec.model.kind, spec.graph
    last = spec.model.layers if last is None else last
    count = reversals(kind, last - first, first > 0 or kind != "sage")
    return count * rebuild_bytes(g.nodes, g.stored_edges) / memory_bytes_per_s(acc)
