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

from plait.cost.compute import matmul_flops_per_s
from plait.cost.links import collective_s
from plait.hardware.cluster import Cluster
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
