"""The separate gradient-accumulation kernel of every micro-batch's backward (Megatron-LM of 2021).

Megatron-LM of 2021 computes each weight gradient into a fresh tensor in the parameters' 16-bit dtype and then adds
it to the gradient buffer in its own elementwise kernel, every micro-batch: with the contiguous buffers that fp32
accumulation (and bf16) forces, ``DistributedDataParallel``'s backward hook runs ``param.main_grad.add_(param.grad)``
(megatron/model/distributed.py ``_make_param_hook``; megatron/arguments.py sets ``use_contiguous_buffers_in_ddp``
when ``accumulate_allreduce_grads_in_fp32``, @90e0a0dd, 2021-06-11); without them autograd's ``AccumulateGrad``
adds it into the 16-bit ``.grad`` in place. Either reads the new gradient and the buffer and writes the buffer:
``param_bytes + 2 grad_bytes`` per parameter (6 in 16-bit, 10 into fp32), at the accelerator's streaming rate. The
16-bit path skips the add on a step's first micro-batch (autograd keeps the first gradient as it is), so there it is
an upper bound by one micro-batch. Megatron fused the accumulation into the weight-gradient GEMM's epilogue from
2022 (``gradient_accumulation_fusion``, NVIDIA/Megatron-LM 83b1e42f, 2022-02-13); later engines pay no such pass.
"""

from __future__ import annotations

from typing import Any

from plait.cost.compute import memory_bytes_per_s
from plait.cost.memory import param_bytes
from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns


def accumulate_s(cluster: Cluster, cols: PlanColumns, params: Any, grad_bytes: Any) -> Any:
    """Seconds of one micro-batch's accumulation pass over ``params`` weights on one rank (module docstring)."""
    return params * (param_bytes(cols) + 2 * grad_bytes) / memory_bytes_per_s(cluster.accelerator)
