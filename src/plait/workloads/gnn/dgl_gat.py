"""Values DGL's GATConv streams through memory in one layer's neighbour aggregation, forward and backward
(:func:`plait.workloads.gnn.compute.aggregation_values` for ``library = "dgl"``, ``kind = "gat"``).

DGL's GATConv (dmlc/dgl python/dgl/nn/pytorch/conv/gatconv.py; its edge softmax and the gradients of its sparse
operations in python/dgl/backend/pytorch/sparse.py) runs edge-wise kernels over ``h`` values per edge: the logits' sum (``u_add_v``, ``3h``), the leaky ReLU (``2h``), the edge softmax (a
max, a subtraction with the exponent after it, a sum and a division: ``10h``), then the message product
(``u_mul_e`` sum: ``w + h`` per edge, ``w`` per output node): ``(m + n) w + 16hm + 2hn`` values; backward the
product's two gradients (``w + h`` and ``2w + h``), the softmax's (``out * grad``, a sum, a product and a
subtraction: ``10h``), the leaky ReLU's (``3h``) and the logits' two sums (``2h``): ``(m + n) w + 2mw + 17hm +
3hn``. Before these, each node's two logits (python/dgl/nn/pytorch/conv/gatconv.py at 0.6.1 lines 292-293: ``el =
(feat_src * self.attn_l).sum(dim=-1)``, ``er`` alike over ``feat_dst``): a product (``2w``) and a sum over each head's
channels (``w + h``) apiece, ``6nw + 2nh``; backward each product's two gradients (the input's, ``w + h``; the
attention vector's, a product ``2w + h`` then a sum over the nodes ``w``) and the input's three gradient paths (the
two logits' and the message product's) added twice (``3w`` each): ``14nw + 4nh`` (the sums' gradients are expanded
views, no kernel). Each of the 12 kernels that walk the edges (6 each way: the four sparse ones of the softmax with the
logits' SDDMM and the product's SpMM forward; the product's SpMM and SDDMM, the softmax's SpMM and SDDMM and the
logits' two SpMMs backward) reads two ids per edge, of :data:`DGL_INDEX_BYTES` each. The ``h``-wide reads that do
not follow the edges' stored order (:data:`DGL_GAT_RANDOM_READS`) each move whole 32-byte sectors
(:data:`plait.workloads.gnn.sectors.SECTOR_BYTES`: 8 values for ``h < 8``, where a streaming count charges ``h``).
"""

from __future__ import annotations

from plait.workloads.gnn.model import FEATURE_BYTES
from plait.workloads.gnn.sectors import sector_values

DGL_INDEX_BYTES = 4
"""int32 ids: DGL's examples and the DGL 0.5 benchmark convert their graphs and blocks with ``.int()``
(dglai/dgl-0.5-benchmark main_dgl_reddit_gat.py ``g = g.int().to(device)``)."""
DGL_GAT_EDGE_KERNELS = 6
"""Kernels of DGL's GATConv that walk the edges, each way (module docstring)."""
DGL_GAT_RANDOM_READS = (6, 3)
"""``h``-wide reads per edge of DGL's GATConv kernels that do not follow the edges' stored order, forward and
backward. DGL's SDDMM walks the COO in stored order and its SpMM the destination-major CSC, reading edge values
through the CSC's edge ids (dmlc/dgl src/array/kernel.cc: ``SDDMM`` takes ``SelectFormat(0, COO_CODE)``, ``SpMM`` the
CSC); with the edges stored source-major (assumed: the
scipy matrices DGL's datasets load are row-major; an edge list in no order would make the source side's reads random
too, 7 and 5) the random reads are:
forward ``u_add_v``'s ``er[v]``, the edge softmax's max and sum over the CSC (the logits by edge id) and its two
``e_op_v`` reads of them (python/dgl/backend/pytorch/sparse.py ``EdgeSoftmax``), and the message SpMM's attention by
edge id; backward the softmax's sum over the CSC and its ``e_mul_v`` read, and the logits' gradient summed onto the
destinations over the CSC."""


def dgl_gat_values(n: float, m: float, width: float, heads: int) -> tuple[float, float]:
    """Values one DGL GATConv layer's aggregation of ``m`` edges into ``n`` nodes reads and writes, forward and
    backward, kernel by kernel with two ids per edge per edge-wise kernel (module docstring)."""
    ids = DGL_GAT_EDGE_KERNELS * 2 * DGL_INDEX_BYTES / FEATURE_BYTES * m
    waste = sector_values(heads) - heads  # what each random h-wide read moves beyond its h values
    logits = (6 * n * width + 2 * n * heads, 14 * n * width + 4 * n * heads)  # el and er, each way
    return ((m + n) * width + 16 * heads * m + 2 * heads * n + ids + DGL_GAT_RANDOM_READS[0] * waste * m + logits[0],
            (m + n) * width + 2 * m * width + 17 * heads * m + 3 * heads * n + ids
            + DGL_GAT_RANDOM_READS[1] * waste * m + logits[1])
