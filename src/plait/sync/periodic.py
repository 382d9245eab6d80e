"""Periodic averaging: replicas train apart and average their parameters every few steps.

- ``local_sgd:every=H``: no gradient traffic; every H steps one all-reduce of every parameter (PyTorch
  ``PeriodicModelAverager``): per step, the parameters' bytes over H;
- ``diloco:every=H,...``: no gradient traffic; after every H inner steps one fp32 all-reduce of the
  pseudo-gradient, one value per parameter (Douillard et al. 2023, Algorithm 1; :class:`plait.run.outer_loop.DiLoCo`),
  inner AdamW, outer Nesterov;
- ``palsgd:every=H,...,warmup=W``: PALSGD (Naganuma et al., arXiv 2504.18454): in the first W steps every gradient
  (an fp32 all-reduce), and at the W-th the parameters too; then DiLoCo's, every H steps (gradient and
  pseudo-synchronization steps alike, the warm-up counted: the authors' ``global_step``); each step is, with
  probability p, a pseudo-synchronization step that sends nothing, the replica pulled toward the last outer model
  (:class:`plait.run.outer_loop.PALSGD`);
- ``dreamddp:every=H``: DreamDDP's partial local SGD (Tang et al., arXiv 2502.11058): no gradient traffic; each
  step one in-place all-reduce of the parameters of the units :mod:`plait.plan.partial` schedules at that step,
  every parameter once per period, overlapping the backward pass (:class:`plait.run.sync.DreamDDP`).

Time and memory (steady state, per step): local SGD and DiLoCo average after the optimizer step, over whole
replicas (with sharding, each HSDP ``dp_replicate`` group averages its shard), exposed; local SGD holds the flat
buffer of the averaged parameters, DiLoCo and PALSGD :data:`DILOCO_BUFFERS` copies and stream
:data:`DILOCO_PASSES` passes per outer step (and PALSGD :data:`PULL_PASSES` in each pseudo-synchronization step)
at the sustained memory bandwidth; DreamDDP's whole period of in-place averaging, which
:mod:`plait.cost.batch` hides behind the backward passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from plait.errors import ConfigError
from plait.sync.base import FP32_PASS_BYTES, GRAD_BYTES, SyncMethod, choice, elements_of, number

if TYPE_CHECKING:
    from plait.sync.hooks import Costs, OptimizerHooks, Pricing, R, Tally
    from plait.workload.tensors import Shape

STEPS = 2**31 - 1
"""Largest period or step count a spec may state."""
DILOCO_PASSES = 14
"""Streaming passes over the fp32 parameters in one outer step of :class:`plait.run.outer_loop.DiLoCo`: the delta
``outer - local`` (read 2, write 1), its flat copy (2), the mean (2), SGD with Nesterov momentum (read gradient,
momentum and parameter, write momentum and parameter: 5) and the copy back (2)."""
PULL_PASSES = 5
"""Streaming passes over the fp32 parameters in a PALSGD pseudo-synchronization step of :class:`plait.run.outer_loop.
PALSGD`: the difference to the outer copy (read 2, write 1) and the scaled subtraction (read 1, write 1)."""
DILOCO_BUFFERS = 4
"""fp32 copies per parameter while DiLoCo synchronizes: the outer parameters, their momentum, the deltas and
their flat buffer (which the outer gradients view)."""


@dataclass(frozen=True, kw_only=True)
class LocalSGD(SyncMethod):
    """``local_sgd:every=H``: periodic model averaging every H steps (PyTorch's ``PeriodicModelAverager``)."""

    name: ClassVar[str] = "local_sgd"
    infrequent: ClassVar[bool] = True
    group_local_steps: ClassVar[bool] = True

    every: int = number(None, 1, STEPS, True)
    """Steps between averagings."""

    def step_payload_bytes(self, shapes: list[Shape], step: int | None) -> float:
        elements = elements_of(shapes)
        if step is None:
            return elements * GRAD_BYTES / self.every
        return elements * GRAD_BYTES if step % self.every == 0 else 0.0  # PeriodicModelAverager: steps 0, H, 2H

    def step_costs(self, price: Pricing) -> Costs:
        group, stride, local = price.averaging_group()
        average = price.all_reduce_s(group, stride, local)
        return price.full(0.0), average / self.every, local  # the flat buffer of the averaged params

    def wrap_optimizer(self, hooks: OptimizerHooks[R]) -> R:
        return hooks.local_sgd(self)


@dataclass(frozen=True, kw_only=True)
class DiLoCo(SyncMethod):
    """``diloco:every=H,outer_lr=..,outer_momentum=..``: DiLoCo (Douillard et al. 2023). Defaults: the outer SGD's
    lr 0.7 and Nesterov momentum 0.9 (Douillard et al. 2023, Sec. 3; torchft's DiLoCo trainer uses the same)."""

    name: ClassVar[str] = "diloco"
    infrequent: ClassVar[bool] = True

    every: int = number(None, 1, STEPS, True)
    """Inner steps between outer steps."""
    outer_lr: float = number(0.7, 0.0, 1e3, False)
    """The outer SGD's learning rate."""
    outer_momentum: float = number(0.9, 0.0, 1.0, False)
    """The outer SGD's Nesterov momentum."""

    def step_payload_bytes(self, shapes: list[Shape], step: int | None) -> float:
        return _outer_payload_bytes(elements_of(shapes), self.every, step)

    def step_costs(self, price: Pricing) -> Costs:
        return _outer_costs(price, self.every, 0.0)

    def wrap_optimizer(self, hooks: OptimizerHooks[R]) -> R:
        return hooks.diloco(self)


def _outer_costs(price: Pricing, every: int, pulls: float) -> Costs:
    """Costs of DiLoCo's outer steps every ``every`` steps, and a fraction ``pulls`` of steps pulling toward the
    outer copy (PALSGD's pseudo-synchronization steps)."""
    group, stride, local = price.averaging_group()
    average = price.all_reduce_s(group, stride, local)
    passes = DILOCO_PASSES * (local / GRAD_BYTES) * FP32_PASS_BYTES / price.memory_bytes_per_s
    if pulls:
        pull = pulls * PULL_PASSES * (local / GRAD_BYTES) * FP32_PASS_BYTES / price.memory_bytes_per_s
        return price.full(0.0), (average + passes) / every + pull, DILOCO_BUFFERS * local
    return price.full(0.0), (average + passes) / every, DILOCO_BUFFERS * local


def _outer_payload_bytes(elements: int, every: int, step: int | None) -> float:
    """DiLoCo's bytes in ``step``: one fp32 all-reduce of the pseudo-gradient after every ``every`` inner steps."""
    if step is None:  # steady state (a warm-up is a vanishing share of a long run)
        return elements * GRAD_BYTES / every
    return elements * GRAD_BYTES if step % every == every - 1 else 0.0  # after H inner steps


@dataclass(frozen=True, kw_only=True)
class PALSGD(SyncMethod):
    """``palsgd:every=H,p=..,eta=..,outer_lr=..,outer_momentum=..,warmup=W``: PALSGD (Naganuma et al., arXiv
    2504.18454). Defaults p 0.2, eta 0.5, outer lr 0.25 and Nesterov momentum 0.9: the defaults of its authors'
    GPT-Neo trainer (github.com/Hiroki11x/Pseudo-Asynchronous-LocalSGD at 2c37c48, ``gptneo_8m``; their paper's own
    settings were not found). ``warmup``: steps of plain data parallelism before the local steps begin (the
    authors' ``local_sgd_start_iter``, default 100 in their trainer's options, 32 in their README's example); 0
    here, the setting plait's measured multipliers were taken at."""

    name: ClassVar[str] = "palsgd"
    infrequent: ClassVar[bool] = True
    pseudo_steps: ClassVar[bool] = True

    every: int = number(None, 1, STEPS, True)
    """Steps between outer steps (the warm-up and pseudo-synchronization steps counted)."""
    p: float = number(0.2, 0.0, 0.99, False)
    """The probability that a step is a pseudo-synchronization step."""
    eta: float = number(0.5, 0.0, 1e3, False)
    """How far a pseudo-synchronization step pulls the replica toward the outer model."""
    outer_lr: float = number(0.25, 0.0, 1e3, False)
    """The outer SGD's learning rate."""
    outer_momentum: float = number(0.9, 0.0, 1.0, False)
    """The outer SGD's Nesterov momentum."""
    warmup: int = number(0, 0, STEPS, True)
    """Steps of plain data parallelism before the local steps begin."""

    @property
    def gradient_step_fraction(self) -> float:
        """``1 - p``: the other steps are pseudo-synchronization steps (the authors' trainer skips their batch)."""
        return 1.0 - self.p

    def step_payload_bytes(self, shapes: list[Shape], step: int | None) -> float:
        if step is not None and step < self.warmup:  # plain data parallelism, then the replicas averaged
            return elements_of(shapes) * GRAD_BYTES * (2 if step == self.warmup - 1 else 1)
        return _outer_payload_bytes(elements_of(shapes), self.every, step)

    def step_costs(self, price: Pricing) -> Costs:
        return _outer_costs(price, self.every, self.p)

    def wrap_optimizer(self, hooks: OptimizerHooks[R]) -> R:
        return hooks.palsgd(self)


@dataclass(frozen=True, kw_only=True)
class DreamDDP(SyncMethod):
    """``dreamddp:every=H``: each unit of layers averaged once per period, at its own step (Tang et al., arXiv
    2502.11058; :mod:`plait.plan.partial`)."""

    name: ClassVar[str] = "dreamddp"
    infrequent: ClassVar[bool] = True
    partial_averaging: ClassVar[bool] = True

    every: int = number(None, 1, STEPS, True)
    """Steps in a period: each unit is averaged at one of them."""
    schedule: Literal["even", "profiled"] = choice("even", ("even", "profiled"))
    """``even``: runs of about equal parameter count (:mod:`plait.plan.partial`); ``profiled``: the least exposed
    all-reduce time under the cost model's per-unit times (:mod:`plait.cost.partial_times`, the paper's search)."""

    def sent_bytes(self, tally: Tally) -> float:
        """Each unit's parameters once per period, at its step (:mod:`plait.plan.partial`)."""
        if tally.step is None:
            return elements_of(tally.shapes) * GRAD_BYTES / self.every
        if self.schedule == "profiled":
            raise ConfigError(f"dp_sync={self.spec!r}: a step's bytes depend on the cluster's times; "
                              "plait.cost.partial_times.profiled_steps gives its units")
        return tally.scheduled_elements(self.every) * GRAD_BYTES

    def step_costs(self, price: Pricing) -> Costs:
        """A whole period's averaging, in place (no buffer); :mod:`plait.cost.batch` hides it behind backward passes."""
        zero = price.full(0.0)
        return price.all_reduce_s(price.replicas, price.stride, price.held_bytes), zero, zero

    def wrap_optimizer(self, hooks: OptimizerHooks[R]) -> R:
        return hooks.dreamddp(self)
