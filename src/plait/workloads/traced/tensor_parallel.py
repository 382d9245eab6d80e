"""Tensor parallelism of a traced module's Linear pairs (:class:`plait.workloads.traced.model.LinearPair`): what it
allows, what it costs, what it saves.

Megatron's MLP split (Shoeybi et al. 2019, "Megatron-LM", Sec. 3, Fig. 3a): with ``tp`` ranks the first Linear of
a pair is split by columns and the second by rows, so

- **compute**: each rank runs ``1/tp`` of both Linears' GEMMs, forward and backward (the traced operators with
  FLOPs inside the pair's two modules; the elementwise operators between them, the bias gradients and everything
  outside the pairs are charged whole on every rank: an upper bound where the activation runs on a slice);
- **communication**: one all-reduce of the pair's output activation (``b x`` its bytes per example) in the forward
  (operator ``g``) and one of the same size in the backward (operator ``f``, the input's gradient), per pair and
  micro-batch, on the TP group's tier (the group's ranks are adjacent: stride 1); they sit between dependent GEMMs,
  so none is hidden. A recomputed unit runs its forward, and its forward all-reduce, again;
- **memory**: both weights and the first's bias are ``1/tp`` per rank, with their gradients and optimizer state;
  saved activations are charged whole (the trace does not attribute saved tensors to modules: an upper bound).

So far a traced plan takes ``tp`` alone (``dp = pp = 1``): the data-parallel and pipeline costs of
:mod:`plait.workloads.traced.cost` assume their groups' ranks are adjacent, and the runtime composes
``parallelize_module`` with neither DDP nor pipelining yet (:mod:`plait.workloads.traced.worker`).
"""

from __future__ import annotations

from dataclasses import replace

from plait.cost.links import collective_s
from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.plan.plan import Plan
from plait.workloads.traced.model import TracedWorkload, Unit


def check_tp(work: TracedWorkload, plan: Plan) -> None:
    """One-line refusals of ``plan.tp`` on ``work`` (module docstring): pairs must exist, ``tp`` must divide every
    pair's split dimension, and ``tp`` runs alone."""
    if plan.tp == 1:
        return
    if not work.pairs:
        raise ConfigError(f"tp={plan.tp}: {work.name} has no Linear pair to split ({work.no_pairs_reason}); use tp=1")
    for pair in work.pairs:
        if pair.hidden % plan.tp:
            raise ConfigError(f"tp={plan.tp} must divide the split dimension {pair.hidden} of the Linear pair "
                              f"{pair.first} -> {pair.second}")
    if plan.tp_mode != "1d" or plan.overlap_chunks > 1 or plan.tp_comm_overlap:
        raise ConfigError(f"tp={plan.tp}: a traced module's Linear pairs split one way (tp_mode='1d') with their "
                          "all-reduces whole (overlap_chunks = 1, tp_comm_overlap = false)")
    if plan.dp > 1 or plan.pp > 1:
        raise ConfigError(f"tp={plan.tp} with dp={plan.dp} and pp={plan.pp}: a traced module's tensor parallelism "
                          "is costed and run alone so far (dp = pp = 1)")


def tp_possible(work: TracedWorkload, gpus: int) -> list[int]:
    """The ``tp`` degrees above 1 the planner tries on ``gpus`` GPUs: every GPU (tp runs alone), where that divides
    every pair's split dimension."""
    if gpus > 1 and work.pairs and all(p.hidden % gpus == 0 for p in work.pairs):
        return [gpus]
    return []


def split_unit(unit: Unit, tp: int) -> Unit:
    """``unit`` as one of ``tp`` ranks runs it: its pairs' GEMMs (operators with FLOPs inside a pair) at ``1/tp``."""
    if tp == 1 or not any(k.tp_split for k in unit.kernels):
        return unit
    kernels = tuple(replace(k, flops_per_example=k.flops_per_example / tp, fixed_bytes=k.fixed_bytes / tp,
                            bytes_per_example=k.bytes_per_example / tp) if k.tp_split and k.flops_per_example else k
                    for k in unit.kernels)
    return replace(unit, kernels=kernels)


def tp_comm_s(cluster: Cluster, work: TracedWorkload, plan: Plan, group: list[int], recomputed: list[bool]) -> float:
    """Seconds of one micro-batch's pair all-reduces on a stage holding the units ``group`` (module docstring)."""
    if plan.tp == 1:
        return 0.0
    held = set(group)
    total = 0.0
    for pair in (p for p in work.pairs if p.unit in held):
        once = float(collective_s(cluster, "all_reduce", plan.tp, 1, pair.output_bytes_per_example * plan.micro_batch))
        total += (3 if recomputed[pair.unit] else 2) * once
    return total


def params_per_rank(work: TracedWorkload, group: list[int], tp: int) -> float:
    """Parameters one rank of the TP group holds of the units ``group``: the pairs' split ones ``1/tp``."""
    held = set(group)
    whole = float(sum(work.units[i].num_params for i in group))
    split = sum(p.split_params for p in work.pairs if p.unit in held)
    return whole - split * (1.0 - 1.0 / tp)
