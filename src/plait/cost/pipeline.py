"""Pipeline schedules: micro-batches in flight and the time of one step's pipeline phase.

Column-wise over plans (numpy arrays; a single plan is a batch of one).

- In-flight activations: GPipe keeps all ``m`` micro-batches (Huang et al. 2019);
  1F1B keeps ``p - i`` on stage ``i`` (Narayanan et al. 2021, Sec. 2.2.1, PipeDream-
  Flush); the interleaved schedule holds ``p + (p-1)/v`` on the first stage, i.e. multiplies
  its ``p`` by ``1 + (p-1)/(p v)`` (Korthikanti et al. 2022, Sec. 4.2.3), and ``p + (p-1-2i)/v`` on stage
  ``i``: every rank runs ``(v-1) p + 2 (p-1-i)`` forward chunks before its first backward and then one more
  before each (Megatron-LM ``get_pp_rank_microbatches``, megatron/core/pipeline_parallel/schedules.py
  @0d8e0714 L728-729 with ``microbatch_group_size_per_vp_stage`` = p and L1031 ``max_outstanding_backprops
  = num_warmup_microbatches + 1``; PyTorch ``_get_warmup_ops`` of ``ScheduleInterleaved1F1B``), so its last
  stage holds nearly ``p``, not 1F1B's one; ZB-H1 keeps 1F1B's peak (Qi et al. 2023, "Zero Bubble Pipeline
  Parallelism", Sec. 3.1).
- Time: with per-micro-batch stage times ``t_i`` the steady state is paced by the
  slowest stage and fill/drain add the bubble ``(p-1)/v`` mean stage-times for
  1F1B/GPipe/interleaved (Narayanan et al. 2021, Sec. 2.2.2, bubble fraction
  ``(p-1)/(v m)``). ZB-H1 (Qi et al. 2023, Sec. 3.1) fills the bubble with deferred
  weight-gradient passes W; in the order PyTorch runs (:func:`plait.simulate.schedules.zb_h1`)
  the bubble is ``(p-1)(T_F + max(0, T_B - T_W)) + max(0, p-m) T_W`` with ``T_B`` the
  input-gradient part of the backward — the paper's ``(p-1)(T_F + T_B - T_W)`` for ``m >= p``,
  derived by hand for uniform stages and checked against the event simulation. The closed
  forms are tested against the simulator on the dev-set layouts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from plait.plan.columns import PlanColumns

if TYPE_CHECKING:
    import numpy as np


def inflight_micro_batches(cols: PlanColumns, stage: np.ndarray) -> np.ndarray:
    """Micro-batches whose activations stage ``stage`` (per row) holds at its peak."""
    xp, p, m = cols.xp, cols["pp"], cols.num_micro_batches
    v = cols["vpp"]
    chunks = (v - 1) * p + 2 * (p - 1 - stage) + 1  # forward chunks outstanding at the first backward
    interleaved = cols.is_("schedule", "interleaved") & (v > 1)
    held = xp.where(interleaved, chunks / v, p - stage)
    held = xp.where(cols.is_("schedule", "gpipe"), m, xp.minimum(held, m))
    return xp.where(p == 1, 1.0, held) * 1.0  # a float column either way


def pipeline_time_s(cols: PlanColumns, slowest_s: np.ndarray, mean_s: np.ndarray,
                    mean_backward_s: np.ndarray, mean_weight_grad_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(busy time of the slowest stage over all micro-batches, bubble time) per row.

    ``slowest_s``/``mean_s`` are per-micro-batch forward+backward times of the slowest and the
    average stage; ``mean_backward_s`` the average stage's backward time and ``mean_weight_grad_s``
    the part of it ZB-H1 runs as W.
    """
    xp, p, m = cols.xp, cols["pp"], cols.num_micro_batches
    busy = m * slowest_s
    forward_s, input_grad_s = mean_s - mean_backward_s, mean_backward_s - mean_weight_grad_s
    zero_bubble = ((p - 1) * (forward_s + xp.maximum(0.0, input_grad_s - mean_weight_grad_s))
                   + xp.maximum(0, p - m) * mean_weight_grad_s)
    bubble = xp.where(cols.is_("schedule", "zb-h1"), zero_bubble, (p - 1) / cols["vpp"] * mean_s)
    return busy, xp.where(p == 1, 0.0, bubble)
