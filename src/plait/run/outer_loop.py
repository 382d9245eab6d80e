"""Optimizers that wrap an inner one with an outer loop over the data-parallel replicas: DiLoCo (Douillard et
al. 2023, Algorithm 1) and PALSGD (Naganuma et al., arXiv 2504.18454), and the flat fp32 mean they average with.
:mod:`plait.run.sync` hands them to the methods that pick them."""

from __future__ import annotations

import random
from collections.abc import Iterator

import torch

from plait.run.local import local_tensor
from plait.run.replica_grads import shard_gradients_like_parameters
from plait.run.sites import Reducer
from plait.run.wrapped import Wrapped


def averaged(tensors: list[torch.Tensor], replicas: Reducer) -> list[torch.Tensor]:
    """The mean of ``tensors`` over the ``replicas``, in one flat fp32 all-reduce, as fp32 pieces shaped as each
    tensor."""
    flat = torch.cat([t.reshape(-1).to(torch.float32) for t in tensors])
    replicas.all_reduce(flat).wait()
    flat /= replicas.size
    return [piece.view_as(t) for piece, t in zip(flat.split([t.numel() for t in tensors]), tensors)]


class DiLoCo(Wrapped):
    """DiLoCo's outer loop around the inner optimizer ``inner`` (Douillard et al. 2023, Algorithm 1): every
    ``every`` inner steps, ``delta = outer - local`` is averaged over ``replicas`` in one fp32 all-reduce, the outer
    copy steps with ``torch.optim.SGD`` (lr ``outer_lr``, Nesterov momentum ``outer_momentum``; plain SGD at 0) and
    every replica restarts from it. Memory: the outer copy, its gradient and momentum, 4 bytes each per parameter."""

    def __init__(self, inner: torch.optim.Optimizer, every: int, outer_lr: float, outer_momentum: float,
                 replicas: Reducer) -> None:
        super().__init__(inner)
        self.every, self.replicas, self.steps = every, replicas, 0
        self.local = [local_tensor(p) for g in inner.param_groups for p in g["params"]]
        self.outer = [p.detach().to(torch.float32).clone().requires_grad_(True) for p in self.local]
        self.outer_optimizer = torch.optim.SGD(self.outer, lr=outer_lr, momentum=outer_momentum,
                                               nesterov=outer_momentum > 0)

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[no-untyped-def,override]
        loss = self.inner.step(closure)
        self.steps += 1
        if self.steps % self.every == 0:
            self.synchronize()
        return loss

    @torch.no_grad()
    def synchronize(self) -> None:
        """The outer step: average the pseudo-gradients, step the outer copy, restart the replicas from it."""
        deltas = [o - p.to(torch.float32) for o, p in zip(self.outer, self.local)]
        for o, mean in zip(self.outer, averaged(deltas, self.replicas)):
            o.grad = mean
        self.outer_optimizer.step()
        for o, p in zip(self.outer, self.local):
            p.copy_(o)


def skips_gradient(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer``'s coming step runs no forward or backward pass (a :class:`PALSGD`
    pseudo-synchronization step): the training loop then calls only ``optimizer.step()``."""
    return isinstance(optimizer, PALSGD) and optimizer.pseudo


def pseudo_steps(p: float, seed: int = 0) -> Iterator[bool]:
    """Whether each step of :class:`PALSGD` (from the first) is a pseudo-synchronization step: independent draws
    with probability ``p`` (the authors' ``np.random.uniform(0, 1) < p``), the same sequence on every rank."""
    draws = random.Random(seed)
    while True:
        yield draws.random() < p


class PALSGD(DiLoCo):
    """PALSGD (Naganuma et al., arXiv 2504.18454), as its authors' trainer runs it (github.com/Hiroki11x/
    Pseudo-Asynchronous-LocalSGD at 2c37c48, ``postadaptive_localsgd_decoupled.py``): ``warmup`` steps of plain
    data parallelism (:meth:`reduce` averages the gradients before clipping, as DDP would; the authors'
    ``use_ddp`` phase), the replicas' parameters averaged and taken as the outer copy at its end; then DiLoCo in
    which each step is, with probability ``p`` (one draw per step, the same on every rank), a
    pseudo-synchronization step ``x <- x - (lr / p) * eta * (x - outer)`` — no forward, backward or
    communication; the training loop asks :func:`skips_gradient` and calls only :meth:`step` — and otherwise a
    gradient step of the inner optimizer at ``lr / (1 - p)``. Every ``every`` steps of either kind (the warm-up's
    counted, as the authors' ``global_step``), DiLoCo's outer step. The authors also average the AdamW moments in
    the warm-up; here they stay equal because the gradients are."""

    def __init__(self, inner: torch.optim.Optimizer, every: int, p: float, eta: float, outer_lr: float,
                 outer_momentum: float, replicas: Reducer, seed: int = 0, warmup: int = 0) -> None:
        super().__init__(inner, every, outer_lr, outer_momentum, replicas)
        self.p, self.eta, self.warmup = p, eta, warmup
        self.draws = pseudo_steps(p, seed)  # the same sequence on every rank
        self.pseudo = warmup == 0 and next(self.draws)
        """Whether the coming step is a pseudo-synchronization step (:func:`skips_gradient`)."""

    @torch.no_grad()
    def reduce(self) -> None:
        """In the warm-up, every local gradient becomes the replicas' mean (one flat fp32 all-reduce)."""
        if self.steps >= self.warmup:
            return
        params = [p for g in self.param_groups for p in g["params"] if p.grad is not None]
        shard_gradients_like_parameters(params)
        grads = [local_tensor(p.grad) for p in params]  # type: ignore[arg-type]
        for grad, mean in zip(grads, averaged(grads, self.replicas)):
            grad.copy_(mean)

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[no-untyped-def,override]
        if self.steps < self.warmup:
            loss = self.inner.step(closure)
            self.steps += 1
            if self.steps == self.warmup:  # the authors' outer_model_sync: average, and start the outer copy there
                for p, o, mean in zip(self.local, self.outer, averaged(self.local, self.replicas)):
                    p.copy_(mean)
                    o.copy_(mean)
                self.pseudo = next(self.draws)
            return loss
        loss = None
        if self.pseudo:
            rates = [group["lr"] for group in self.param_groups for _ in group["params"]]  # self.local's order
            for p, o, rate in zip(self.local, self.outer, rates):
                p.sub_(rate / self.p * self.eta * (p - o.to(p.dtype)))
        else:
            rates = [group["lr"] for group in self.param_groups]
            for group in self.param_groups:
                group["lr"] = group["lr"] / (1.0 - self.p)
            loss = self.inner.step(closure)
            for group, rate in zip(self.param_groups, rates):
                group["lr"] = rate
        self.steps += 1
        if self.steps % self.every == 0:
            self.synchronize()
        self.pseudo = next(self.draws)
        return loss
