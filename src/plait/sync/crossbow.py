"""Crossbow: several small-batch learners per GPU kept together by synchronous model averaging (SMA).

Koliousis et al., "Crossbow: Scaling Deep Learning with Small Batch Sizes on Multi-GPU Servers", VLDB 2019
(arXiv 1901.02244), Sec. 3 and Algorithm 1, as the authors' artifact runs it (github.com/lsds/Crossbow,
``clib-multigpu/synch/sma.c``, ``crossbowSynchronisationMultiGPUSynchronousModelAveraging``). Every learner ``j``
holds its own replica ``w_j`` and every GPU a copy of the central average model ``z``; in each iteration

- ``c_j = alpha (w_j - z)`` (the correction, from the replica the gradient is taken at),
- ``w_j <- w_j - c_j - (the learner's own optimizer update of its small batch)``,
- ``z <- z + sum_j c_j + momentum (z - z_prev)`` (the sum over the learners of every GPU: an intra-GPU sum,
  then one all-reduce of one model per GPU).

``crossbow:learners=K,alpha=A,momentum=M``: K learners per data-parallel rank, each taking ``1/K`` of the rank's
micro-batch (K must divide it, :mod:`plait.plan.rules`); ``alpha`` 0 stands for ``1/n``, n the learners of every
rank (assumed: with ``momentum`` 0 the central model then moves to the learners' mean; the artifact's default is
0.5, ``SolverConf``), ``momentum`` 0.9 (the artifact's multi-GPU SMA sets 0.9 where momentum is on, ``sma.c``).

Cost per step and rank (steady state), the runtime's (:mod:`plait.run.crossbow`):

- bytes: one fp32 all-reduce of the rank's parameters (the learners' summed corrections), every step;
- compute: the plan's forward and backward of the rank's micro-batch, split over the learners. Assumed: K
  concurrent learners of ``b/K`` samples keep the GPU as busy as one batch of ``b`` (the paper's premise: "when the
  batch size is sufficiently small to leave GPU resources unused, Crossbow trains a second model replica, a third,
  etc., as long as training throughput increases", lsds.doc.ic.ac.uk/node/464) — an upper bound on their throughput,
  which Crossbow's auto-tuner approaches by adding learners only while it rises;
- exposed: K - 1 more optimizer steps (one per extra learner), :data:`PASSES_PER_LEARNER` streaming fp32 passes per
  learner and :data:`CENTRAL_PASSES` for the central model at the sustained memory bandwidth, and the all-reduce
  (after the learners' steps: nothing left to overlap it with in plait's runtime);
- memory: K - 1 more replicas' weights, gradients and optimizer state, and :data:`BUFFERS` fp32 copies (the
  central model, its last move, the corrections' sum).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from plait.sync.base import FP32_PASS_BYTES, GRAD_BYTES, SyncMethod, elements_of, number

if TYPE_CHECKING:
    from plait.sync.hooks import Costs, OptimizerHooks, Pricing, R
    from plait.workload.tensors import Shape

MAX_LEARNERS = 64
"""Most learners per rank a spec may state (the paper runs up to a handful per GPU)."""
PASSES_PER_LEARNER = 11
"""Streaming passes over one learner's fp32 parameters in one SMA step of :class:`plait.run.crossbow.Crossbow`:
the gradient scaled to the learner's own batch mean (read 1, write 1), ``d = w - z`` (read 2, write 1),
``w -= alpha d`` (read 2, write 1) and ``sum += alpha d`` (read 2, write 1)."""
CENTRAL_PASSES = 9
"""Streaming passes over the fp32 parameters for the central model per step: zeroing the sum (write 1),
``sum += momentum last`` (read 2, write 1), ``last = sum`` (read 1, write 1) and ``z += sum`` (read 2, write 1)."""
BUFFERS = 3
"""fp32 copies per parameter the SMA keeps on each rank: the central model, its last move and the corrections' sum."""


@dataclass(frozen=True, kw_only=True)
class Crossbow(SyncMethod):
    """``crossbow:learners=K,alpha=A,momentum=M``: K learners per rank under synchronous model averaging."""

    name: ClassVar[str] = "crossbow"
    infrequent: ClassVar[bool] = True  # learners train apart; parameters, not gradients, are averaged
    whole_learners: ClassVar[bool] = True

    learners: int = number(None, 1, MAX_LEARNERS, True)
    """Learners (model replicas) per data-parallel rank, each on ``1/learners`` of the rank's micro-batch."""
    alpha: float = number(0.0, 0.0, 1.0, False)
    """How far each learner is pulled toward the central model per step (0: ``1/n``, n the learners of all ranks)."""
    momentum: float = number(0.9, 0.0, 0.999, False)
    """The central model's momentum."""

    def step_payload_bytes(self, shapes: list[Shape], step: int | None) -> float:
        """One fp32 all-reduce of the rank's summed corrections, one model's worth, every step."""
        return float(elements_of(shapes) * GRAD_BYTES)

    def step_costs(self, price: Pricing) -> Costs:
        group, stride, local = price.averaging_group()  # whole replicas only (plait.plan.rules): local = held
        average = price.all_reduce_s(group, stride, local)
        elements = local / GRAD_BYTES
        passes = (PASSES_PER_LEARNER * self.learners + CENTRAL_PASSES) * elements * FP32_PASS_BYTES
        steps = (self.learners - 1) * price.optimizer_step_s
        extra = (self.learners - 1) * price.replica_state_bytes + BUFFERS * local
        return price.full(0.0), average + passes / price.memory_bytes_per_s + steps, extra

    def wrap_optimizer(self, hooks: OptimizerHooks[R]) -> R:
        return hooks.crossbow(self)

    def pull(self, total_learners: int) -> float:
        """``alpha``, with 0 read as ``1 / total_learners``."""
        return self.alpha or 1.0 / total_learners
