"""Bytes each data-parallel replica hands to collectives per step, by synchronization method.

Payload bytes: the tensors given to ``all_reduce`` (exact integers for a model and plan); the collective's own
traffic on the wire is the payload times its algorithm's factor (ring all-reduce: ``2 (n-1)/n`` per rank,
Patarasuk & Yuan, JPDC 69(2), 2009), applied where time is costed. For a replica holding whole (unsharded)
gradients, fp32 (plait's runtime and PyTorch DDP keep gradients in the parameter dtype), each method's bytes are
its own answer (:meth:`plait.sync.base.SyncMethod.step_payload_bytes`, with the formula and its source in each
family's module: :mod:`plait.sync.allreduce`, :mod:`~plait.sync.half`, :mod:`~plait.sync.powersgd`,
:mod:`~plait.sync.sparse`, :mod:`~plait.sync.periodic`); DreamDDP's per-step share follows
:mod:`plait.plan.partial`'s schedule, and the point-to-point methods' bytes :mod:`plait.cost.servers`,
:mod:`plait.cost.gossip` and :mod:`plait.cost.async_sgd`.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np

from plait.cost import async_sgd, gossip, servers
from plait.cost.compute import fp32_flops_per_s, memory_bytes_per_s
from plait.cost.links import collective_s
from plait.cost.overlap import engaged_s, hidden_remainder
from plait.cost.params import stage_layer_counts
from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns
from plait.plan.partial import step_elements
from plait.sync import (
    MODELLED,
    PALSGD,
    DreamDDP,
    Gathered,
    Gossip,
    HalfPrecision,
    LocalSGD,
    ParamServer,
    PowerSGD,
    SwitchAggregation,
    SyncMethod,
    TopK,
)
from plait.sync.base import GRAD_BYTES as GRAD_BYTES  # fp32 gradients and parameters; plait.cost.egress
from plait.workload.model import ModelSpec
from plait.workload.tensors import Shape, rank_shapes

def payload_bytes(sync: SyncMethod, named: list[tuple[str, Shape]], step: int | None = None, rank: int = 0,
                  replicas: int = 2, tokens: int = 0) -> float:
    """Bytes one replica hands to collectives (and, for the server and gossip methods, to point-to-point sends) in one
    step (``named``: the parameters' names and shapes, :func:`plait.workload.tensors.parameter_shapes`; ``step``:
    that step, counted from 0, for the methods whose traffic changes with it; ``None``: the mean over a period in
    steady state; ``rank`` of ``replicas``: for the methods whose ranks send different bytes)."""
    shapes = [s for _, s in named]
    elements = sum(math.prod(s) for s in shapes)
    if isinstance(sync, ParamServer | SwitchAggregation):  # plait.cost.servers
        return float(servers.sent_bytes(sync, named, rank, replicas, tokens))
    if isinstance(sync, Gossip):  # plait.cost.gossip
        return gossip.sent_bytes(sync, elements, rank, replicas, step)
    if sync.asynchronous:  # a worker's pushes to its servers (plait.run.async_train)
        return async_sgd.worker_bytes(sync, elements, step)
    if isinstance(sync, DreamDDP):  # each unit's parameters once per period, at its step (plait.plan.partial)
        if step is None:
            return elements * GRAD_BYTES / sync.every
        return step_elements(named, sync.every, step) * GRAD_BYTES
    return sync.step_payload_bytes(shapes, step)


# --- time and memory of a pure data-parallel plan's synchronization --------------------------------------------
FP32_PASS_BYTES = 4
TOPK_PASSES = 11
"""Streaming passes over the fp32 gradient in :class:`plait.run.sync.TopK`: add into the residual (read 2,
write 1), absolute value (2), top-k selection (2: assumed, a radix select reads its input twice), the dense sum
(zero 1, index_add 0), the average (2) and the buffer copy (1)."""
QUANTIZE_PASSES = 10
"""Streaming passes over the fp32 gradient in :class:`plait.run.sync.Quantize` besides one per gathered rank:
residual add (3), the scale's reduction (1), quantize and pack (2), the own dequantize and residual update (3),
the average into the bucket (1)."""
POWERSGD_PASSES = 4
"""Streaming passes over each compressed matrix besides its GEMMs: error feedback's add (read 2, write 1) and the
copy of the decompressed result into the bucket (1)."""


DILOCO_PASSES = 14
"""Streaming passes over the fp32 parameters in one outer step of :class:`plait.run.sync.DiLoCo`: the delta
``outer - local`` (read 2, write 1), its flat copy (2), the mean (2), SGD with Nesterov momentum (read gradient,
momentum and parameter, write momentum and parameter: 5) and the copy back (2)."""
PULL_PASSES = 5
"""Streaming passes over the fp32 parameters in a PALSGD pseudo-synchronization step of :class:`plait.run.sync.
PALSGD`: the difference to the outer copy (read 2, write 1) and the scaled subtraction (read 1, write 1)."""
DILOCO_BUFFERS = 4
"""fp32 copies per parameter while DiLoCo synchronizes: the outer parameters, their momentum, the deltas and
their flat buffer (which the outer gradients view)."""


def _rank_shape_groups(model: ModelSpec, cols: PlanColumns,
                       stage: Any) -> list[tuple[Any, list[tuple[str, Shape]]]]:
    """[(rows, named)]: the local parameters (names, shapes) one rank of stage ``stage`` holds (TP rank 0: the largest
    chunks; :func:`plait.workload.tensors.rank_shapes`), for each distinct (tp, layers, first, last) among the rows
    of ``cols``; ``rows`` a mask (``True`` for one plan)."""
    xp, pp = cols.xp, cols["pp"]
    layers, _ = stage_layer_counts(model, pp, stage, xp)
    first, last = stage == 0, stage == pp - 1
    if xp.scalar:
        return [(True, rank_shapes(model, int(cols["tp"]), 0, int(layers), bool(first), bool(last)))]
    keys = np.stack(np.broadcast_arrays(cols["tp"], layers, first, last), axis=1).astype(np.int64)
    distinct, inverse = np.unique(keys, axis=0, return_inverse=True)
    return [(inverse.reshape(-1) == i, rank_shapes(model, int(tp), 0, int(n), bool(f), bool(lt)))
            for i, (tp, n, f, lt) in enumerate(distinct)]


def method_costs(model: ModelSpec | None, cluster: Cluster, sync: SyncMethod, cols: PlanColumns,
                 params: dict[str, Any], stage: Any = 0, busy: Any = 0.0,
                 named: list[tuple[str, Shape]] | None = None) -> tuple[Any, Any, Any]:
    """(seconds that overlap the backward pass like DDP's buckets, seconds on the critical path, extra bytes of
    memory per GPU) of ``sync`` on each row of ``cols`` (:mod:`plait.plan.rules`: cp = ep = 1), per step in steady
    state, for one rank of the slowest stage ``stage``. ``params``: the parameters that rank holds
    (:func:`plait.cost.memory.stage_params`; TP shards, norms replicated), which local SGD and DiLoCo average with
    the same rank of every other replica; the per-step methods send its local gradient tensors
    (:func:`_rank_shape_groups`), over the replicas ``tp`` ranks apart. ``busy``: the step's compute, which
    Pipe-SGD's all-reduce runs behind (Li et al. 2018, Sec. 3; contention per byte moved,
    :func:`plait.cost.overlap.engaged_s`).

    Overlap (assumed from the runtime): bf16/fp16 run in DDP's bucketed hooks like the all-reduce, but over TP or
    PP replicas, which DDP does not take, after the backward (:mod:`plait.run.replica_grads`); PowerSGD's
    dependent P and Q all-reduces, top-k's all-gathers and their compute are taken as exposed (``plait run``
    keeps one bucket on gloo, so they follow the backward); local SGD and DiLoCo average after the optimizer step,
    over whole replicas (with sharding, each HSDP ``dp_replicate`` group averages its shard). GEMMs of PowerSGD
    at the fp32 peak (optimistic), streaming passes at the sustained memory bandwidth. ``named``: the rank's
    parameters where they come from elsewhere than ``model``'s closed forms (a traced workload,
    :mod:`plait.cost.traced`; ``model`` is then unused)."""
    if sync.infrequent:
        return _averaging_costs(cluster, sync, cols, params)
    if sync.asynchronous:  # closed-network bounds, plait.cost.async_sgd
        return async_sgd.async_costs(cluster, sync, cols, params["dense"] + params["expert"], busy)
    groups = [(True, named)] if named is not None else _rank_shape_groups(model, cols, stage)  # type: ignore[arg-type]
    if isinstance(sync, ParamServer | SwitchAggregation):
        over = shown = extra = cols.zeros()
        for rows, held in groups:
            o, s, e = servers.aggregated_costs(cluster, sync, cols, held)
            over, shown, extra = (cols.xp.where(rows, new, old) for new, old in ((o, over), (s, shown), (e, extra)))
        return over, shown, extra
    if not (sync.compressed or sync.pipelined):
        raise ConfigError(f"dp_sync={sync.spec!r}: not modelled yet (modelled: {', '.join(MODELLED)})")
    over = shown = extra = cols.zeros()
    for rows, held in groups:
        o, s, e = _gradient_costs(cluster, sync, cols, [shape for _, shape in held], busy)
        over, shown, extra = (cols.xp.where(rows, new, old) for new, old in ((o, over), (s, shown), (e, extra)))
    return over, shown, extra


def _gradient_costs(cluster: Cluster, sync: SyncMethod, cols: PlanColumns, shapes: list[Shape],
                    busy: Any) -> tuple[Any, Any, Any]:
    """:func:`method_costs` of a per-step method whose rank sends gradient tensors of ``shapes``."""
    elements = sum(math.prod(s) for s in shapes)
    replicas, stride, full = cols.dp, cols["tp"], cols.full
    zero, memory_bw = full(0.0), memory_bytes_per_s(cluster.accelerator)
    split = (cols["tp"] > 1) | (cols["pp"] > 1)
    if isinstance(sync, HalfPrecision):
        reduce = collective_s(cluster, "all_reduce", replicas, stride, full(elements * 2.0))
        return cols.xp.where(split, 0.0, reduce), cols.xp.where(split, reduce, 0.0), zero
    if sync.pipelined:  # the reduction runs behind the whole next step
        sent = elements * float(GRAD_BYTES)
        reduce = collective_s(cluster, "all_reduce", replicas, stride, full(sent))
        ring = 2.0 * (replicas - 1) / replicas * sent  # ring all-reduce, per rank (Patarasuk & Yuan 2009)
        engaged = cols.xp.minimum(reduce, engaged_s(ring, cluster.tiers[0].bandwidth_bytes_per_s(sent)))
        overlap = cluster.accelerator.efficiency.comm_overlap.value
        return zero, hidden_remainder(reduce, busy, overlap, cols.xp, engaged), full(2.0 * sent)
    if isinstance(sync, PowerSGD):
        p = q = plain = flops = streamed = 0.0
        for shape, count in Counter(shapes).items():
            n, m, r, compressed = sync.matrix(shape)
            if compressed:
                p, q = p + count * n * r, q + count * m * r
                flops += count * (6.0 * n * m * r + 2.0 * n * r * r)  # P = MQ, Q = M^T P, M - PQ^T; Gram-Schmidt
                streamed += count * POWERSGD_PASSES * n * m * FP32_PASS_BYTES
            else:
                plain += count * n * m
        comm = sum(collective_s(cluster, "all_reduce", replicas, stride, full(x * GRAD_BYTES)) for x in (plain, p, q))
        memory = (elements - plain + p + q) * GRAD_BYTES  # error-feedback buffers of compressed tensors, P and Q
        return zero, comm + full(flops / fp32_flops_per_s(cluster.accelerator) + streamed / memory_bw), full(memory)
    # top-k and quantize: two all-gathers per gradient tensor (values and indices; codes and scale), each paying
    # its own latency
    assert isinstance(sync, Gathered), sync
    gathered = 0.0
    for numel, count in Counter(math.prod(s) for s in shapes).items():
        pieces = sync.gathered_pieces(numel)
        gathered = gathered + count * sum(collective_s(cluster, "all_gather", replicas, stride, replicas * full(b))
                                          for b in pieces)
    # quantize also dequantizes and adds every rank's codes: two passes per rank
    streamed = (full(TOPK_PASSES * elements * FP32_PASS_BYTES / memory_bw) if isinstance(sync, TopK)
                else (QUANTIZE_PASSES + 2 * replicas) * (elements * FP32_PASS_BYTES / memory_bw))
    largest = max(math.prod(s) for s in shapes)  # a dense sum is built one tensor at a time
    return zero, gathered + streamed, full((elements + largest) * float(FP32_PASS_BYTES))  # the residual, that sum


def _averaging_costs(cluster: Cluster, sync: SyncMethod, cols: PlanColumns,
                     params: dict[str, Any]) -> tuple[Any, Any, Any]:
    """:func:`method_costs` of the methods that average parameters every few steps."""
    replicas, full = cols.dp, cols.full
    zero, memory_bw = full(0.0), memory_bytes_per_s(cluster.accelerator)
    held = (params["dense"] + params["expert"]) * GRAD_BYTES  # what a rank averages
    if isinstance(sync, DreamDDP):  # a whole period's averaging; plait.cost.batch hides it behind backward passes
        return collective_s(cluster, "all_reduce", replicas, cols["tp"], held), zero, zero  # in place: no buffer
    xp, whole = cols.xp, cols.is_("sharding", "none")
    shard = xp.where(whole, 1, cols["dp_shard"])  # cp = ep = 1 (plait.plan.rules)
    group, local = xp.where(whole, replicas, cols["dp_replicate"]), held / shard
    if isinstance(sync, Gossip):  # neighbours exchange copies instead (plait.cost.gossip)
        return gossip.gossip_costs(cluster, sync, cols, group, shard * cols["tp"], local / GRAD_BYTES)
    average = collective_s(cluster, "all_reduce", group, shard * cols["tp"], local)  # replicas tp*shard apart
    if isinstance(sync, LocalSGD):
        return zero, average / sync.every, local  # the flat buffer of the averaged params
    passes = DILOCO_PASSES * (local / GRAD_BYTES) * FP32_PASS_BYTES / memory_bw
    if isinstance(sync, PALSGD):  # and a fraction p of steps pull toward the outer copy (plait.cost.batch)
        pull = sync.p * PULL_PASSES * (local / GRAD_BYTES) * FP32_PASS_BYTES / memory_bw
        return zero, (average + passes) / sync.every + pull, DILOCO_BUFFERS * local
    return zero, (average + passes) / sync.every, DILOCO_BUFFERS * local
