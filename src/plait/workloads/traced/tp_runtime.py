"""Tensor parallelism of a traced module's Linear pairs on torch.distributed, alone or beside DDP (``tp x dp``).

- **Mesh.** The ranks as ``(dp, tp)``: a TP group's ranks are adjacent, the ``dp`` ranks holding the same shard
  ``tp`` apart (Megatron-LM's order, Narayanan et al., SC 2021, Sec. 3.3), as the cost model places them
  (:mod:`plait.workloads.traced.tensor_parallel`).
- **Split.** Each pair (:mod:`plait.workloads.traced.pairs`) by ``parallelize_module``: the first Linear (and its
  gates) ``ColwiseParallel``, the second ``RowwiseParallel`` (Shoeybi et al. 2019, Sec. 3, Fig. 3a); each
  self-attention (:mod:`plait.workloads.traced.attention`) likewise, q, k and v ``ColwiseParallel`` (each rank's
  contiguous block of heads), the output projection ``RowwiseParallel``, the core running unchanged on the local
  heads (its views infer the head count: Fig. 3b); a pipeline stage's likewise (:func:`split_stage_pairs`).
- **Replicas.** With ``dp > 1``, PyTorch's TP + DDP composition: ``_pre_dp_module_transform`` turns the DTensor
  parameters into local ones for DDP's buckets (torch/distributed/tensor/parallel/ddp.py), then
  ``DistributedDataParallel`` over the ``dp`` group; its comm hook is DDP's own ``allreduce_hook``
  (torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py), wrapped to count each bucket's bytes.
- **Bytes.** What a rank hands to each collective per step, to check against the cost model's
  (:func:`plait.workloads.traced.tensor_parallel.pair_bytes`, :func:`plait.workloads.traced.dataparallel.ddp_bytes`):
  DTensor's all-reduces (``_c10d_functional.all_reduce``, forward and backward) seen by a dispatch mode, and DDP's
  buckets seen by the hook.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode


class Counts:
    """Bytes handed to the TP group's all-reduces and to DDP's buckets since the last :meth:`take`."""

    def __init__(self) -> None:
        self.tp_bytes = 0
        self.dp_bytes = 0

    def take(self) -> tuple[int, int]:
        """(TP bytes, DP bytes) so far; both restart at 0."""
        taken = (self.tp_bytes, self.dp_bytes)
        self.tp_bytes = self.dp_bytes = 0
        return taken


class _CountAllReduces(TorchDispatchMode):
    """Adds each functional all-reduce's input bytes (DTensor's ``Partial -> Replicate``) to ``counts``."""

    def __init__(self, counts: Counts) -> None:
        super().__init__()
        self.counts = counts

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops._c10d_functional.all_reduce.default:
            self.counts.tp_bytes += args[0].numel() * args[0].element_size()
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def counting(counts: Counts) -> Iterator[None]:
    """Within the block, DTensor's all-reduces add their bytes to ``counts`` (forward and backward: the autograd
    engine runs a CPU backward on the calling thread, under its dispatch modes)."""
    with _CountAllReduces(counts):
        yield


def mesh_of(tp: int, dp: int) -> Any:
    """The ranks as ``(dp, tp)`` (module docstring)."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))


def split_pairs(model: nn.Module, units: list[str], tp_mesh: Any, pairs: list[Any] | None = None) -> nn.Module:
    """``model`` with each Linear pair and attention of its units (``pairs``:
    :func:`plait.workloads.traced.attention.runtime_splits`'s, found here when not given) split over ``tp_mesh``
    (module docstring)."""
    from torch.distributed.tensor.parallel import RowwiseParallel, parallelize_module

    from plait.workloads.traced.attention import runtime_splits

    if pairs is None:
        pairs, why = runtime_splits(model, units)
        if not pairs:
            raise ValueError(f"tp={tp_mesh.size()}: {why}")
    styles: dict[str, Any] = {}
    for _, first, second, _, _, gates in pairs:
        slot: list[Any] = []  # the group's shared input (_SharedInputColwise)
        styles.update({path: _shared_input_colwise(slot, 1 + len(gates)) for path in (first, *gates)})
        styles[second] = RowwiseParallel()
    return parallelize_module(model, tp_mesh, styles)  # type: ignore[no-any-return]


def _shared_input_colwise(slot: list[Any], uses: int) -> Any:
    """``ColwiseParallel`` for one of ``uses`` column-parallel Linears reading one input (q, k and v; a pair's first
    and its gates): the first to read a tensor wraps it as a replicated DTensor and the others reuse that DTensor,
    so their input gradients sum before the one all-reduce of ``DTensor.from_local``'s backward (Megatron's fused
    qkv and ``linear_fc1`` all-reduce once: Shoeybi et al. 2019, Sec. 3, operator ``f``). Hand-written because
    PyTorch's style wraps each Linear's input on its own, one backward all-reduce each (PyTorch 2.13). ``slot``
    holds the tensor and its wrapper until the last of the ``uses`` has read it."""
    from torch.distributed.tensor.parallel import ColwiseParallel

    class SharedInputColwise(ColwiseParallel):
        def _apply(self, module: nn.Module, device_mesh: Any) -> nn.Module:
            def prepare(layouts: Any, desired: Any, mod: nn.Module, inputs: Any, mesh: Any) -> Any:
                if not slot or slot[0] is not inputs[0]:
                    slot[:] = [inputs[0], ColwiseParallel._prepare_input_fn(layouts, desired, mod, inputs, mesh), 0]
                slot[2] += 1
                wrapped = slot[1]
                if slot[2] == uses:
                    slot.clear()
                return wrapped

            self._prepare_input_fn = prepare  # type: ignore[method-assign, assignment]  # read by _apply's partial
            return super()._apply(module, device_mesh)  # type: ignore[no-any-return]

    return SharedInputColwise()


def split_stage_pairs(stage: nn.Module, model: nn.Module, units: list[str], tp_mesh: Any) -> nn.Module:
    """A pipeline stage (``torch.distributed.pipelining``'s tracer) with the pairs of its ``units`` split over
    ``tp_mesh``; the pairs are read from the whole ``model``'s units (the stage's are traced graphs). The tracer's
    stage holds each Linear as an ``InterpreterModule`` running ``aten.linear`` on the same weight and bias, which
    ``parallelize_module``'s styles refuse (they take ``nn.Linear``): each pair's Linears become ``nn.Linear`` over
    those same parameters first, which computes the same."""
    from plait.workloads.traced.attention import runtime_splits

    pairs, why = runtime_splits(model, units)
    if not pairs:
        raise ValueError(f"tp={tp_mesh.size()}: {why}")
    for _, first, second, _, _, gates in pairs:
        for path in (first, second, *gates):
            parent_path, _, name = path.rpartition(".")
            parent, traced = stage.get_submodule(parent_path), stage.get_submodule(path)
            linear = nn.Linear(traced.weight.shape[1], traced.weight.shape[0], bias=traced.bias is not None,
                               device="meta")
            linear.weight, linear.bias = traced.weight, traced.bias
            parent.register_module(name, linear)
    return split_pairs(stage, units, tp_mesh, pairs)


def replicate(model: nn.Module, dp_mesh: Any, counts: Counts) -> nn.Module:
    """The split ``model`` under DDP over ``dp_mesh``, its buckets counted into ``counts`` (module docstring)."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.distributed.tensor.parallel.ddp import _pre_dp_module_transform
    from torch.nn.parallel import DistributedDataParallel

    _pre_dp_module_transform(model)
    group = dp_mesh.get_group()
    ddp = DistributedDataParallel(model, process_group=group)

    def counted(state, bucket):  # type: ignore[no-untyped-def]  # DDP checks the annotation: none, or GradBucket
        buffer = bucket.buffer()
        counts.dp_bytes += buffer.numel() * buffer.element_size()
        return allreduce_hook(state, bucket)

    ddp.register_comm_hook(group, counted)
    return ddp


def parameters_of(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The split (and replicated) ``model``'s parameters by their names in the unsplit module, taken before its first
    forward: ``_pre_dp_module_transform``'s hooks swap the split ones for DTensor views of them during a forward and
    leave those behind as plain attributes, so ``named_parameters()`` lists them no more afterwards (PyTorch 2.13)."""
    inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    return list(inner.named_parameters())


def parameter_sum(named: list[tuple[str, torch.Tensor]], whole: dict[str, int], tp_mesh: Any) -> float:
    """The sum of every parameter of the split model whole (``named``: :func:`parameters_of`): a shard's sum added
    over the TP group (a parameter with fewer elements than ``whole`` names is a shard), a replicated one once."""
    total = 0.0
    for name, param in named:
        local = param.to_local() if hasattr(param, "to_local") else param
        part = local.detach().double().sum()
        if local.numel() < whole[name]:
            dist.all_reduce(part, group=tp_mesh.get_group())
        total += float(part)
    return total
