"""Tensor parallelism of a traced module's Linear pairs and self-attentions
(:class:`plait.workloads.traced.model.LinearPair`): what it allows, what it costs, what it saves.

Megatron's MLP split (Shoeybi et al. 2019, "Megatron-LM", Sec. 3, Fig. 3a): with ``tp`` ranks the first Linear of
a pair is split by columns and the second by rows; its self-attention split (Fig. 3b) is the same with q, k and v
split by columns (by heads), the core on each rank's heads and the output projection by rows, so

- **compute**: each rank runs ``1/tp`` of both Linears' GEMMs, forward and backward (the traced operators with
  FLOPs inside the pair's two modules; the elementwise operators between them, the bias gradients and everything
  outside the pairs are charged whole on every rank: an upper bound where the activation runs on a slice); of an
  attention, also every operator of its core module outside its Linears (they act on the rank's heads);
- **communication**: one all-reduce of the pair's output activation (``b x`` its bytes per example) in the forward
  (operator ``g``) and one of the same size in the backward (operator ``f``, the input's gradient), per pair and
  micro-batch, on the TP group's tier (the group's ranks are adjacent: stride 1); they sit between dependent GEMMs,
  so none is hidden. A recomputed unit runs its forward, and its forward all-reduce, again;
- **memory**: both weights and the first's bias are ``1/tp`` per rank, with their gradients and optimizer state;
  saved activations are charged whole (the trace does not attribute saved tensors to modules: an upper bound).

Beside data parallelism (``tp x dp``, Narayanan et al., SC 2021, Sec. 2.3 and 3.3): the ``tp`` ranks of a TP group
are adjacent and ``dp`` groups of them each train a replica on ``1/dp`` of the batch, DDP all-reducing each rank's
gradients (its shard of the pairs' weights, the rest whole) over the ``dp`` ranks that hold the same shard, ``tp``
ranks apart (:mod:`plait.workloads.traced.dataparallel`); beside pipeline stages (``pp``, ``tp x dp`` ranks apart)
each stage's pairs split over its TP group. The replicas are unsharded with the all-reduce (``sharding = "none"``,
``dp_sync = "allreduce"``): the runtime splits the module (or each pipeline stage) under DDP or the stage's
gradient averaging (:mod:`plait.workloads.traced.tp_runtime`), not under FSDP2.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from plait.cost.links import collective_s
from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.plan.plan import Plan
from plait.workloads.traced.model import TracedWorkload, Unit


def check_tp(work: TracedWorkload, plan: Plan) -> None:
    """One-line refusals of ``plan.tp`` on ``work`` (module docstring): pairs must exist, ``tp`` must divide every
    pair's split dimension and every attention's head counts, and ``tp`` runs alone or beside DDP's replicas."""
    if plan.tp == 1:
        return
    if not work.pairs:
        raise ConfigError(f"tp={plan.tp}: {work.name} has no Linear pair to split ({work.no_pairs_reason}); use tp=1")
    for pair in work.pairs:
        if not pair.divides(plan.tp):
            dims = (f"the head counts {'/'.join(map(str, pair.heads))} (q/k/v)" if pair.heads
                    else f"the split dimension {pair.hidden}")
            raise ConfigError(f"tp={plan.tp} must divide {dims} of the {pair.kind}")
    if plan.tp_mode != "1d" or plan.overlap_chunks > 1 or plan.tp_comm_overlap:
        raise ConfigError(f"tp={plan.tp}: a traced module's Linear pairs split one way (tp_mode='1d') with their "
                          "all-reduces whole (overlap_chunks = 1, tp_comm_overlap = false)")
    if plan.dp > 1 and (plan.sharding != "none" or not plan.dp_sync.is_allreduce):
        raise ConfigError(f"tp={plan.tp} with sharding={plan.sharding!r} and dp_sync={plan.dp_sync.spec}: a traced "
                          "module's tensor parallelism runs beside the all-reduce of unsharded replicas only "
                          "(sharding = 'none', dp_sync = 'allreduce')")


def tp_possible(work: TracedWorkload, gpus: int) -> list[int]:
    """The ``tp`` degrees above 1 the planner tries on ``gpus`` GPUs: the divisors of ``gpus`` that divide every
    pair's split dimension and every attention's head counts (the rest of the GPUs are data-parallel replicas)."""
    if not work.pairs:
        return []
    return [t for t in range(2, gpus + 1) if gpus % t == 0 and all(p.divides(t) for p in work.pairs)]


def split_unit(unit: Unit, tp: int) -> Unit:
    """``unit`` as one of ``tp`` ranks runs it: its pairs' and attentions' GEMMs (operators with FLOPs inside a
    pair's or an attention's modules) and the other operators of an attention's core (on its heads) at ``1/tp``."""
    if tp == 1 or not any(k.tp_split for k in unit.kernels):
        return unit
    kernels = tuple(replace(k, flops_per_example=k.flops_per_example / tp, fixed_bytes=k.fixed_bytes / tp,
                            bytes_per_example=k.bytes_per_example / tp)
                    if k.tp_split and (k.flops_per_example or k.tp_split_all) else k
                    for k in unit.kernels)
    return replace(unit, kernels=kernels)


def pair_bytes(work: TracedWorkload, plan: Plan, group: list[int], recomputed: list[bool]) -> list[float]:
    """The bytes of each all-reduce one micro-batch's pairs on a stage holding the units ``group`` hand to the TP
    group, in order (module docstring): each pair's output forward, its input's gradient backward, and the forward
    again where its unit is recomputed."""
    if plan.tp == 1:
        return []
    held = set(group)
    sizes: list[float] = []
    for pair in (p for p in work.pairs if p.unit in held):
        sizes += [pair.output_bytes_per_example * plan.micro_batch] * (3 if recomputed[pair.unit] else 2)
    return sizes


def tp_comm_s(cluster: Cluster, work: TracedWorkload, plan: Plan, group: list[int], recomputed: list[bool]) -> float:
    """Seconds of one micro-batch's pair all-reduces on a stage holding the units ``group`` (:func:`pair_bytes`), on
    adjacent ranks (stride 1)."""
    return sum(float(collective_s(cluster, "all_reduce", plan.tp, 1, size))
               for size in pair_bytes(work, plan, group, recomputed))


def rank_elements(work: TracedWorkload, tp: int) -> Callable[[str, tuple[int, ...]], float]:
    """Elements of the parameter ``(name, shape)`` one rank of a TP group holds: ``1/tp`` of the pairs' weights and
    of the first's and the gates' biases (:attr:`plait.workloads.traced.model.LinearPair.split_params`), the rest
    whole."""
    split = {f"{path}.{kind}" for p in work.pairs for path in (p.first, *p.gates) for kind in ("weight", "bias")}
    split |= {f"{p.second}.weight" for p in work.pairs}

    def elements(name: str, shape: tuple[int, ...]) -> float:
        count = math.prod(shape)
        return count / tp if tp > 1 and name in split else float(count)

    return elements


def params_per_rank(work: TracedWorkload, group: list[int], tp: int) -> float:
    """Parameters one rank of the TP group holds of the units ``group``: the pairs' split ones ``1/tp``."""
    held = set(group)
    whole = float(sum(work.units[i].num_params for i in group))
    split = sum(p.split_params for p in work.pairs if p.unit in held)
    return whole - split * (1.0 - 1.0 / tp)
