"""The optimizer a plan costs: AdamW or SGD with momentum, sharded (ZeRO-1) or offloaded to the host.

- AdamW (Loshchilov & Hutter 2019) with GPT-3's betas (0.9, 0.95; Brown et al. 2020, App. B):
  two fp32 moments per parameter.
- SGD with momentum 0.9 (heavy ball, Polyak 1964; ``torch.optim.SGD``, whose weight decay is the
  coupled L2 term): one fp32 moment — what :func:`plait.cost.memory.optimizer_bytes_per_param`
  costs for ``optimizer = "sgd"``.
- ZeRO-1 (Rajbhandari et al. 2020): ``ZeroRedundancyOptimizer`` over the ``dp_shard`` ranks, with
  either optimizer as its ``optimizer_class``.
- ``offload_optimizer`` without ``offload_params`` is ZeRO-Offload (Ren et al. 2021, Sec. 4): the
  fp32 master copy of each parameter (of this rank's shard of it under FSDP2/TP) and the moments
  live in host memory; each step copies the gradients down, runs the optimizer on the CPU and
  copies the updated weights back (:class:`HostOffloadOptimizer`). With ``offload_params`` FSDP2's
  ``CPUOffloadPolicy`` keeps parameters, gradients and the step on the host already
  (:func:`plait.run.parallel.apply_fsdp`), so the optimizer there is the plain one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.optim.lr_scheduler import LambdaLR

from plait.plan.plan import Optimizer as OptimizerName
from plait.plan.plan import Plan
from plait.run.local import local_tensor
from plait.run.mesh import Mesh
from plait.run.train import TrainConfig, lr_lambda

ADAMW_BETAS = (0.9, 0.95)  # Brown et al. 2020 (GPT-3), App. B
SGD_MOMENTUM = 0.9  # Polyak 1964 / Sutskever et al. 2013's usual value

OptimizerFactory = Callable[[list[torch.Tensor]], torch.optim.Optimizer]


def optimizer_recipe(name: OptimizerName, config: TrainConfig) -> tuple[type[torch.optim.Optimizer], dict[str, Any]]:
    """The torch optimizer class of ``name`` and its keyword arguments."""
    if name == "sgd":
        return torch.optim.SGD, {"lr": config.lr, "momentum": SGD_MOMENTUM, "weight_decay": config.weight_decay}
    return torch.optim.AdamW, {"lr": config.lr, "betas": ADAMW_BETAS, "weight_decay": config.weight_decay}


class HostOffloadOptimizer(torch.optim.Optimizer):
    """Run ``inner`` on fp32 host copies of ``params`` (ZeRO-Offload's CPU step, Ren et al. 2021, Sec. 4).

    Works on plain tensors (single process, DDP) and on DTensor parameters (FSDP2 shards, TP), whose
    local part is copied. Host buffers are pinned when the parameter is on CUDA, so the copies are
    asynchronous; on a CPU machine host and device are the same memory but the copies still happen.
    Hand-written because torch has no optimizer-only offload (FSDP2's ``CPUOffloadPolicy`` also moves
    parameters and gradients) and torchao's ``CPUOffloadOptimizer`` is CUDA/XPU-only, takes gradients
    in a post-accumulate hook (before plait clips them) and does not handle DTensor shards.
    Like torchao's, it does not call ``Optimizer.__init__``: ``param_groups`` and ``state`` are the
    inner optimizer's, so learning-rate schedulers drive the host step.
    """

    def __init__(self, params: list[torch.Tensor], make_inner: OptimizerFactory) -> None:
        self.device_params = [p for p in params if p.requires_grad]
        self.host_params: list[torch.Tensor] = []
        self.host_grads: list[torch.Tensor] = []
        self._on_cuda = any(p.device.type == "cuda" for p in self.device_params)
        for p in self.device_params:
            local = local_tensor(p.detach())
            pinned = p.device.type == "cuda"
            host = torch.empty(local.shape, dtype=torch.float32, device="cpu", pin_memory=pinned)
            host.copy_(local)  # a separate copy even when the device is the CPU
            self.host_params.append(host)
            self.host_grads.append(torch.empty(local.shape, dtype=torch.float32, device="cpu", pin_memory=pinned))
        self.inner = make_inner(self.host_params)
        self.defaults = self.inner.defaults

    @property  # type: ignore[override]
    def param_groups(self) -> list[dict[str, Any]]:
        return self.inner.param_groups

    @property  # type: ignore[override]
    def state(self) -> Any:
        return self.inner.state

    def _synchronize(self) -> None:
        if self._on_cuda:
            torch.cuda.current_stream().synchronize()

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> None:  # type: ignore[override]
        """Gradients down, the optimizer step on the host, updated weights back."""
        assert closure is None, "closures are not supported"
        for p, host, grad in zip(self.device_params, self.host_params, self.host_grads):
            if p.grad is None:
                host.grad = None
                continue
            grad.copy_(local_tensor(p.grad), non_blocking=True)
            host.grad = grad
        self._synchronize()  # the gradients have landed before the CPU reads them
        self.inner.step()
        for p, host in zip(self.device_params, self.host_params):
            local_tensor(p).copy_(host, non_blocking=True)  # ordered before the next forward on the same stream

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.device_params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()
        for host in self.host_params:
            host.grad = None

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.inner.load_state_dict(state_dict)


def build_optimizer(params: list[torch.Tensor], mesh: Mesh, config: TrainConfig,
                    plan: Plan | None = None) -> tuple[torch.optim.Optimizer, LambdaLR]:
    """The plan's optimizer over ``params`` (host-offloaded, ZeRO-1-sharded or plain) and its
    warm-up/cosine schedule; ``plan``: this rank's stage as it runs (:meth:`Plan.for_stage`), else the mesh's."""
    plan = plan if plan is not None else mesh.plan
    optimizer_class, kwargs = optimizer_recipe(plan.optimizer, config)
    optimizer: torch.optim.Optimizer
    if plan.offload_optimizer and not plan.offload_params:
        optimizer = HostOffloadOptimizer(params, lambda host: optimizer_class(host, **kwargs))
    elif plan.sharding == "zero1" and plan.dp > 1:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        optimizer = ZeroRedundancyOptimizer(params, optimizer_class=optimizer_class,
                                            process_group=mesh.sub("dp_shard").get_group(), **kwargs)
    else:
        optimizer = optimizer_class(params, **kwargs)
    return optimizer, LambdaLR(optimizer, lr_lambda(config))
