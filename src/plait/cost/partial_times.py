"""Per-unit backward and all-reduce seconds of DreamDDP's units, and the profiled schedule they give
(:mod:`plait.plan.partial_profiled`; Tang et al., arXiv 2502.11058, whose artifact profiles both on the GPUs).

plait computes the profile instead of measuring it:

- backward: a unit's weight matrices take ``4 T N_u`` FLOPs in the backward pass of ``T`` tokens (twice the
  forward's ``2 T N_u``: Narayanan et al. SC 2021, Sec. 5.1, "the backward pass requires twice the FLOPs of the
  forward"), at the accelerator's sustained bf16 GEMM rate for a ``T x d`` product
  (:func:`plait.cost.compute.matmul_flops_per_s`); the embedding lookup is no GEMM (0 s) and attention's score
  products are left out (what it leaves out is stated: at short sequences they are a few percent);
- all-reduce: the unit's fp32 parameters across ``replicas`` ranks ``stride`` apart (:func:`plait.cost.links.
  collective_s`, the cost model's all-reduce on the cluster's tiers), one unit at a time, as the artifact launches
  them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from plait.cost.compute import matmul_flops_per_s
from plait.cost.distinct import per_distinct
from plait.cost.links import collective_s
from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns
from plait.plan.partial import unit_of, units_in_backprop_order
from plait.plan.partial_profiled import exposed_run_s, profiled_schedule
from plait.workload.tensors import Shape

PARAM_BYTES = 4
"""DreamDDP averages fp32 parameters (:class:`plait.run.sync.DreamDDP`)."""


def unit_times(named: list[tuple[str, Shape]], cluster: Cluster, replicas: int, stride: int,
               tokens: int) -> tuple[list[str], list[float], list[float]]:
    """(units in backprop order, backward seconds, all-reduce seconds) of each unit of the model ``named`` lists,
    for a micro-batch of ``tokens`` tokens per replica (module docstring)."""
    units = units_in_backprop_order(named)
    gemm, elements = dict.fromkeys(units, 0), dict.fromkeys(units, 0)
    width = 0
    for name, shape in named:
        unit = unit_of(name)
        elements[unit] += math.prod(shape)
        if len(shape) == 2 and not name.endswith("embeddings.weight"):
            gemm[unit] += math.prod(shape)
            width = max(width, min(shape))
    rate = matmul_flops_per_s(cluster.accelerator, "bf16", math.sqrt(tokens * max(width, 1)))
    backward = [4.0 * tokens * gemm[u] / rate for u in units]
    comm = [float(collective_s(cluster, "all_reduce", replicas, stride, PARAM_BYTES * elements[u])) for u in units]
    return units, backward, comm


def profiled_steps(named: list[tuple[str, Shape]], cluster: Cluster, replicas: int, stride: int, tokens: int,
                   every: int) -> tuple[dict[str, int], float]:
    """(step of the period of each unit, mean exposed seconds per step) of the profiled schedule."""
    units, backward, comm = unit_times(named, cluster, replicas, stride, tokens)
    steps, exposed = profiled_schedule(backward, comm, every)
    return dict(zip(units, steps)), exposed / every


def schedule_exposed_s(named: list[tuple[str, Shape]], steps: dict[str, int], cluster: Cluster, replicas: int,
                       stride: int, tokens: int, every: int) -> float:
    """Mean exposed seconds per step of any assignment ``steps`` of units to steps (contiguous runs in backprop
    order, as both plait's schedules are) under the same times: to compare the parameter-count cut with the
    profiled one."""
    units, backward, comm = unit_times(named, cluster, replicas, stride, tokens)
    total = 0.0
    for step in range(every):
        run = [k for k, u in enumerate(units) if steps[u] == step]
        if run:
            assert run == list(range(run[0], run[-1] + 1)), "a step's units must be contiguous in backprop order"
            total += exposed_run_s(backward, comm, run[0], run[-1] + 1)
    return total / every


def profiled_exposed_s(named: list[tuple[str, Shape]], cluster: Cluster, cols: PlanColumns, reduce: Any,
                       backward: Any, every: int) -> Any:
    """Mean exposed seconds per step of the profiled schedule, per row of ``cols``: the units assigned from the
    times of :func:`unit_times` (the row's replicas ``dp``, ranks ``tp x cp`` apart, a micro-batch of
    ``micro_batch x seq_len`` tokens), their exposure then taken at the row's own totals, ``reduce`` (a whole
    period's all-reduce) and ``backward`` (the last micro-batch's), shared as :func:`unit_times` shares them."""
    def one(replicas: float, stride: float, tokens: float, total_reduce: float, total_backward: float) -> tuple[
            float, float]:
        steps, _ = profiled_steps(named, cluster, int(replicas), int(stride), int(tokens), every)
        units, unit_backward, unit_comm = unit_times(named, cluster, int(replicas), int(stride), int(tokens))
        scale_b = total_backward / max(sum(unit_backward), 1e-300)
        scale_c = total_reduce / max(sum(unit_comm), 1e-300)
        backward_s, comm_s = [b * scale_b for b in unit_backward], [c * scale_c for c in unit_comm]
        total = 0.0
        for step in range(every):
            run = [k for k, u in enumerate(units) if steps[u] == step]
            total += exposed_run_s(backward_s, comm_s, run[0], run[-1] + 1) if run else 0.0
        return total / every, 0.0

    tokens = cols["micro_batch"] * cols["seq_len"]
    return per_distinct(cols, one, cols.dp, cols["tp"] * cols["cp"], tokens, reduce, backward)[0]


@dataclass(frozen=True, kw_only=True)
class UnitProfile:
    """What the profiled schedule's times depend on besides the model and the replicas (the runtime's view)."""

    cluster: Cluster
    """The cluster the replicas run on (its GEMM rate and tiers)."""
    stride: int
    """Global ranks between two replicas' same piece (``tp x cp``)."""
    tokens: int
    """Tokens of one micro-batch of one replica."""

    def steps(self, named: list[tuple[str, Shape]], replicas: int, every: int) -> dict[str, int]:
        """The step of the period at which each unit is averaged (:func:`profiled_steps`)."""
        return profiled_steps(named, self.cluster, replicas, self.stride, self.tokens, every)[0]
