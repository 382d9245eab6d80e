"""The host's side of one eager GNN training step: the operations PyTorch dispatches (each a kernel launch) for the
layers, the loss and the optimizer. The device runs them as the host issues them, so a step takes the longer of the
two streams (:func:`plait.cost.host.exposed_host_s`, the queue rule every workload's step shares; the step ends in a
synchronization: ``loss.item()`` or the loader's next batch).

Counted in the code each engine runs (forward and backward, each operation one kernel):

- a PyG gather-scatter layer (torch_geometric/nn/conv/sage_conv.py with ``propagate`` over an ``edge_index``:
  ``index_select``; torch_scatter's mean as a zeroed output, ``scatter_add_``, a count by ``ones`` and a second
  ``scatter_add_``, ``clamp`` and ``div``; two linear maps with a bias add and their sum; ReLU; dropout) 14 forward
  and 12 backward: :data:`PYG_OPS_PER_LAYER`;
- a fused layer (DGL's ``update_all`` or torch_sparse's ``matmul``: the product and the degree division, the two maps,
  their sum, ReLU, dropout) 9 each way: :data:`FUSED_OPS_PER_LAYER`;
- the loss (``log_softmax`` and ``nll_loss``, forward and backward, and the backward's seed gradient): :data:`LOSS_OPS`;
- Adam without ``foreach`` (torch/optim/_functional.py ``adam``, PyTorch 1.8-1.10: the two moments' ``mul_`` and
  ``add_``/``addcmul_``, ``sqrt``, ``div``, ``add_`` and ``addcdiv_``) and ``zero_grad``'s ``zero_`` per parameter
  tensor: :data:`ADAM_OPS_PER_TENSOR`.

Each operation is an eager PyTorch op (PyG, DGL's PyTorch backend and torch_sparse all run eagerly), so it costs the
host its launch call and the framework's dispatch before it (:func:`plait.cost.host.issue_s`). Other
layer kinds are assumed to dispatch as SAGEConv does (not counted).
"""

from __future__ import annotations

from plait.cost.host import issue_s
from plait.hardware.accelerator import Accelerator
from plait.workloads.gnn.compute import GnnLibrary
from plait.workloads.gnn.model import GnnModel
from plait.workloads.gnn.sparse_tensor import FUSED_KINDS

PYG_OPS_PER_LAYER = 26
"""Forward and backward operations of a PyG gather-scatter layer (module docstring)."""
FUSED_OPS_PER_LAYER = 18
"""Forward and backward operations of a fused (DGL or torch_sparse) layer (module docstring)."""
LOSS_OPS = 5
"""The loss forward and backward, and its seed gradient."""
ADAM_OPS_PER_TENSOR = 9
"""Adam's eight single-tensor operations and ``zero_grad``'s one, per parameter tensor."""
TENSORS_PER_LAYER = {"sage": 3, "gcn": 2, "gat": 4, "transformer": 8, "gin": 4}
"""Parameter tensors per layer: SAGEConv's two weights and a bias; GCNConv's weight and bias; GATConv's weight,
two attention vectors and bias; TransformerConv's four weights and biases; GINConv's MLP's two weights and biases (PyG's modules, as
:meth:`plait.workloads.gnn.model.GnnModel.params` counts them)."""


def step_ops(model: GnnModel, library: GnnLibrary) -> int:
    """Operations one training step dispatches (module docstring)."""
    gathers = library in ("pyg", "pyg_sampler") or (library == "pyg_sparse" and model.kind not in FUSED_KINDS)
    per_layer = PYG_OPS_PER_LAYER if gathers else FUSED_OPS_PER_LAYER
    tensors = TENSORS_PER_LAYER[model.kind] * model.layers
    return model.layers * per_layer + LOSS_OPS + ADAM_OPS_PER_TENSOR * tensors


def host_step_s(model: GnnModel, library: GnnLibrary, acc: Accelerator) -> float:
    """Seconds the host takes to dispatch one step."""
    return step_ops(model, library) * issue_s(acc, eager=True)
