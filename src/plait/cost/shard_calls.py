"""ZeRO-3's collective calls per layer: one flat gather and reduce-scatter (FSDP), or one call per parameter tensor
under per-module sharding (``EngineFacts.shard_unit == "module"``).

DeepSpeed's ZeRO-3 gathers each parameter tensor of a sub-module by itself. Tensors with fewer elements than
``stage3_param_persistence_threshold`` are never partitioned (every rank keeps them whole, gathered once per step),
so a layer's gathers are its larger tensors only (deepspeed/runtime/zero/stage3.py v0.3.15,
``persistent_parameters``; the default, 100000, in deepspeed/runtime/zero/constants.py). plait counts a layer's
one-dimensional tensors against it (:meth:`plait.workload.model.ModelSpec.layer_vector_sizes`) and takes its matrices
to lie above it (assumed: a matrix of ``h x h`` has fewer than 100000 elements only below ``h`` = 317).

DeepSpeed of 2021 made each call through torch's list-form collectives, one call per tensor for the reduce-scatter
too (deepspeed/runtime/zero/partition_parameters.py v0.3.15: ``_allgather_param`` calls
``all_gather(partitions, ...)`` with one view per rank, ``_reduce_scatter_gradient`` calls
``reduce_scatter(input_list[rank], input_list)``). The NCCL process group of torch 1.7 and 1.8, which had no flat
``allgather_base``, runs those on one flat buffer and moves each of the ``g`` per-rank views with its own ``copy_``
on the NCCL stream: after an all-gather, each output out of the buffer; before a reduce-scatter, each input into it
(torch/lib/c10d/ProcessGroupNCCL.cpp: ``allgather``'s post-collective loop
``outputTensors[i][j].copy_(outputFlattened[i][j], true)`` and ``reduce_scatter``'s pre-collective
``inputFlattened[i][j].copy_(inputTensors[i][j], true)``). A call thus issues ``g`` copies on the host
(``host_launch_us`` each) that the device runs at no less than ``kernel_launch_us`` each:

- all-gather: the host issues the copies while the collective runs and the device runs them after it, so the call
  ends at ``max(T + g k_dev, g k_host)``;
- reduce-scatter: the copies precede the collective, which starts once the host has issued them all:
  ``max(g k_host, g k_dev) + T``.

DeepSpeed of 2021 synchronized the device before each gather and after its wait (``torch.cuda.synchronize()`` in
``_allgather_param``, ``_synchronize_communication`` in stage3.py), so host and device meet at every call and the
call's time is the later of the two, in line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from plait.cost.inner_values import LayerKind
from plait.cost.links import collective_s
from plait.cost.memory import param_bytes, shard_groups
from plait.engine.facts import EngineFacts
from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns
from plait.plan.ops import Ops
from plait.units import S_PER_US

if TYPE_CHECKING:
    import numpy as np


def gather_call_s(collective_s: Any, group: Any, host_us: float, device_us: float, xp: Ops) -> Any:
    """Seconds of one list-form all-gather over ``group`` ranks whose NCCL collective takes ``collective_s``
    (module docstring): ``max(T + g k_dev, g k_host)``; 0 where there is no collective."""
    copies = xp.maximum(collective_s + group * device_us * S_PER_US, group * host_us * S_PER_US)
    return xp.where(collective_s > 0, copies, 0.0)


def reduce_call_s(collective_s: Any, group: Any, host_us: float, device_us: float, xp: Ops) -> Any:
    """Seconds of one list-form reduce-scatter (module docstring): ``max(g k_host, g k_dev) + T``; 0 where there is
    no collective."""
    copies = group * max(host_us, device_us) * S_PER_US + collective_s
    return xp.where(collective_s > 0, copies, 0.0)


def module_calls(cluster: Cluster, cols: PlanColumns, kind: LayerKind, framework: EngineFacts, active: np.ndarray,
                 grad_bytes: Any, params: Any) -> tuple[Any, Any]:
    """(all-gather, reduce-scatter) seconds of one layer's ZeRO-3 parameters, one flat call each; under
    per-module sharding one gather per tensor the engine partitions, and with list-form collectives one
    reduce-scatter per tensor too, each with its per-rank copies (module docstring; tensors taken as equal-sized)."""
    xp, group, tp = cols.xp, shard_groups(cols)[0], cols["tp"]
    module, listed = framework.shard_unit == "module", framework.shard_list_collectives
    pieces = kind.num_tensors - kind.num_persistent_tensors if module else 1.0
    gathered = xp.maximum(params - kind.num_persistent_params, 0.0) if module else params
    gathered_bytes = xp.where(active, param_bytes(cols) * gathered / pieces, 0.0)
    gather = collective_s(cluster, "all_gather", group, tp, gathered_bytes)
    calls = kind.num_tensors if module and listed else 1.0
    reduce = collective_s(cluster, "reduce_scatter", group, tp, xp.where(active, grad_bytes * params / calls, 0.0))
    if listed:
        eff = cluster.accelerator.efficiency
        host_us, device_us = eff.host_launch_us.value, eff.kernel_launch_us.value
        gather = gather_call_s(gather, group, host_us, device_us, xp)
        reduce = reduce_call_s(reduce, group, host_us, device_us, xp)
    return pieces * gather, calls * reduce
