"""Pipeline parallelism with ``torch.distributed.pipelining``.

Layers are split as evenly as possible over ``pp * vpp`` stages (the estimator's split), or as a run asks
(``--stage-layers``: stages of unequal speed).
Rank ``r`` holds stages ``r, r + pp, ...`` — the looped placement the interleaved schedules
expect (Narayanan et al. 2021, Sec. 2.2.2). Schedules: GPipe (Huang et al. 2019), 1F1B
(Narayanan et al. 2021), interleaved 1F1B, and for ``zb-h1`` (Qi et al. 2023, Sec. 3.1)
PyTorch's ``ScheduleInterleavedZeroBubble`` with one stage per rank: it splits each backward
into input-gradient (``BACKWARD_INPUT``) and weight-gradient (``BACKWARD_WEIGHT``) actions and,
with a single local stage, its order is ZB-H1's (1F1B warm-up, rank ``r`` deferring ``r``
weight gradients to the cool-down) — the order :func:`plait.simulate.schedules.zb_h1` costs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from plait.plan.plan import Plan
from plait.run.mesh import Mesh
from plait.run.uneven import layer_counts

if TYPE_CHECKING:  # torch.distributed.pipelining costs ~0.6 s to import: only pipelined plans load it
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import PipelineScheduleMulti, PipelineScheduleSingle


def stage_layers(num_layers: int, num_stages: int, counts: tuple[int, ...] = ()) -> list[list[int]]:
    """Layer indices of each stage: ``counts[s]`` consecutive layers for stage ``s`` (an uneven split for stages
    of unequal speed, checked by :func:`plait.run.uneven.check_uneven`), or as even as possible (the first stages
    take the remainder)."""
    out, start = [], 0
    for count in layer_counts(num_layers, num_stages, counts):
        out.append(list(range(start, start + count)))
        start += count
    return out


def local_stages(mesh: Mesh, plan: Plan) -> list[int]:
    """Global stage indices on this rank."""
    rank = mesh.coordinate("pp")
    return [rank + i * plan.pp for i in range(plan.vpp)]


def build_schedule(stages: list[PipelineStage], plan: Plan, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                   micro_batches: int) -> PipelineScheduleSingle | PipelineScheduleMulti:
    """The PyTorch schedule object for ``plan.schedule``."""
    from torch.distributed.pipelining.schedules import (
        Schedule1F1B,
        ScheduleGPipe,
        ScheduleInterleaved1F1B,
        ScheduleInterleavedZeroBubble,
    )

    if plan.schedule == "gpipe":
        return ScheduleGPipe(stages[0], micro_batches, loss_fn=loss_fn)
    if plan.schedule == "1f1b":
        return Schedule1F1B(stages[0], micro_batches, loss_fn=loss_fn)
    if plan.schedule == "interleaved":
        return ScheduleInterleaved1F1B(stages, micro_batches, loss_fn=loss_fn)
    assert plan.schedule == "zb-h1" and len(stages) == 1, "zb-h1 runs one stage per rank (plan rules)"
    return ScheduleInterleavedZeroBubble(stages, micro_batches, loss_fn=loss_fn)
