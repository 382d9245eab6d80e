"""Values DGL's ``mean`` reducer streams beyond its sparse product: DGL 0.6-0.7 reduce ``mean`` as a ``sum`` product,
then a division by the destinations' clamped in-degrees in PyTorch (dmlc/dgl python/dgl/ops/spmm.py ``gspmm``: at
0.6.1 lines 69-75, at 0.7.1 lines 90-96: ``deg = g.in_degrees()``, ``F.clamp(deg, 1, ...)``, ``F.astype(...,
F.dtype(ret))``, ``ret / F.reshape(deg, deg_shape)``). DGL's ``SAGEConv`` (``update_all(msg_fn, fn.mean('m',
'neigh'))``, python/dgl/nn/pytorch/conv/sageconv.py at 0.6.1 and 0.7.1) and the DGL 0.5 benchmark's own SAGEConv
(``graph.update_all(fn.copy_src('h', 'm'), fn.mean('m', 'neigh'))``, dglai/dgl-0.5-benchmark
main_dgl_{reddit,arxiv,product}_sage.py) take this path; torch_sparse's ``matmul(reduce="mean")`` divides inside its
kernel and PyG's gather-scatter count already holds its division (:func:`plait.workloads.gnn.compute.aggregation_values`).

Per layer of ``n`` output nodes and rows ``w`` wide, in fp32 values (an int64 is two):

- forward, the degree vector: the in-degrees written from the ``n + 1`` int64 offsets (``4n``), the clamp reading and
  writing them (``4n``), the cast reading them and writing fp32 (``3n``); the division reading the sums and the
  degrees and writing the means (``2nw + n``): ``2nw + 12n``;
- backward, ``DivBackward``'s gradient of the sums, the output's gradient divided by the same degrees (``2nw + n``);
  the degrees take none.
"""

from __future__ import annotations

DEGREE_VECTOR_VALUES = 4 + 4 + 3
"""fp32 values' worth per node of the in-degrees, their clamp and their cast (module docstring)."""


def dgl_mean_values(n: float, width: float) -> tuple[float, float]:
    """Values DGL's ``mean`` reduction of ``n`` rows ``width`` wide streams beyond its ``sum`` product, forward and
    backward (module docstring)."""
    division = 2 * n * width + n
    return division + DEGREE_VECTOR_VALUES * n, division
