"""Crossbow's learners and synchronous model averaging on plain PyTorch (:mod:`plait.sync.crossbow` for the
algorithm, its sources and its costs; no library has it: the authors' artifact is its own C/CUDA engine).

- :class:`Learners`: K replicas of a model in one rank; its forward splits the batch into K equal learner batches
  (first dimension), runs learner ``j`` on the ``j``-th and concatenates the outputs, so one backward gives each
  learner the gradient of its own batch (scaled by ``1/K``: the mean loss over the concatenation is the mean of the
  learners' mean losses). The learners run one after another here; Crossbow runs them on concurrent CUDA streams.
- :class:`Crossbow`: the optimizer around the inner one (which steps every learner's parameters, each with its own
  state): before the inner step, each learner's gradient is scaled back to its own batch mean and the learner moves
  by ``-c_j = -alpha (w_j - z)``; after it the ranks sum their learners' corrections in one fp32 all-reduce of one
  model per rank, and every rank moves its copy of the central model by that sum plus ``momentum`` times its last
  move. The correction is applied before the inner step: for SGD the same as the paper's simultaneous update;
  AdamW's decoupled weight decay then also decays it. Gradient clipping (:meth:`Crossbow.clip`) clips each learner
  by its own norm, as K independent learners would be.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from plait.errors import ConfigError
from plait.run.sites import Reducer
from plait.run.wrapped import Wrapped
from plait.sync import Crossbow as Method


class Learners(nn.Module):
    """``learners`` replicas of ``model`` (the first is ``model`` itself, the others deep copies: every learner
    starts from the same weights), each on an equal share of the batch."""

    def __init__(self, model: nn.Module, learners: int) -> None:
        super().__init__()
        self.replicas = nn.ModuleList([model, *(copy.deepcopy(model) for _ in range(learners - 1))])

    def forward(self, inputs: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        k = len(self.replicas)
        if inputs.shape[0] % k:
            raise ConfigError(f"a batch of {inputs.shape[0]} samples must split evenly over learners={k}")
        chunks = inputs.chunk(k)
        return torch.cat([replica(chunk, *args, **kwargs) for replica, chunk in zip(self.replicas, chunks)])


class Crossbow(Wrapped):
    """Synchronous model averaging of the :class:`Learners` ``learners`` over the ``replicas`` (every rank hosts as
    many learners). The inner optimizer is given every learner's parameters (those it lacks join as parameter groups
    with its defaults). Memory: the central model, its last move and the corrections' sum, fp32, one each."""

    def __init__(self, inner: torch.optim.Optimizer, method: Method, learners: Learners, replicas: Reducer) -> None:
        super().__init__(inner)
        self.replicas, self.momentum = replicas, method.momentum
        self.params = [[p for p in replica.parameters()] for replica in learners.replicas]
        held = {id(p) for g in inner.param_groups for p in g["params"]}
        for params in self.params:
            missing = [p for p in params if id(p) not in held]
            if missing:
                inner.add_param_group({"params": missing})
        self.alpha = method.pull(len(self.params) * replicas.size)
        first = self.params[0]
        sizes = [p.numel() for p in first]
        self.central = torch.cat([p.detach().reshape(-1).to(torch.float32) for p in first])
        self.last = torch.zeros_like(self.central)
        self.total = torch.zeros_like(self.central)
        self.z = [piece.view_as(p) for piece, p in zip(self.central.split(sizes), first)]
        self.sums = [piece.view_as(p) for piece, p in zip(self.total.split(sizes), first)]

    @torch.no_grad()
    def clip(self, max_norm: float) -> float:
        """Clip each learner's gradient by its own 2-norm at ``max_norm``, as the learner alone would
        (``torch.nn.utils.clip_grad_norm_``; each learner takes its own optimizer step on its small batch,
        Koliousis et al., VLDB 2019, Algorithm 1). Before :meth:`step` a learner's gradient is ``1/K`` of its own
        batch mean, so its own norm is ``K`` times this one's, and its clipping factor scales both alike. Returns
        the largest learner's norm (non-finite when any is)."""
        k, norms = len(self.params), []
        for params in self.params:
            held = [p for p in params if p.grad is not None]
            if held:
                norm = torch.nn.utils.get_total_norm([p.grad for p in held]).float() * k  # the learner's own
                torch.nn.utils.clip_grads_with_norm_(held, max_norm, norm)
                norms.append(norm)
        return float(torch.stack(norms).max()) if norms else 0.0

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[no-untyped-def,override]
        k = len(self.params)
        self.total.zero_()
        for params in self.params:
            for p, z, total in zip(params, self.z, self.sums):
                if p.grad is not None:
                    p.grad.mul_(k)  # the learner's own batch mean (module docstring)
                difference = p.to(torch.float32) - z
                p.sub_(difference.to(p.dtype), alpha=self.alpha)
                total.add_(difference, alpha=self.alpha)
        loss = self.inner.step(closure)
        self.replicas.all_reduce(self.total).wait()  # the corrections of every learner of every rank
        self.total.add_(self.last, alpha=self.momentum)
        self.last.copy_(self.total)
        self.central.add_(self.total)
        return loss
