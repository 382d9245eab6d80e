"""Bytes each data-parallel replica hands to collectives per step, by synchronization method.

Payload bytes: the tensors given to ``all_reduce`` (exact integers for a model and plan); the collective's own
traffic on the wire is the payload times its algorithm's factor (ring all-reduce: ``2 (n-1)/n`` per rank,
Patarasuk & Yuan, JPDC 69(2), 2009), applied where time is costed. For a replica holding whole (unsharded)
gradients, fp32 (plait's runtime and PyTorch DDP keep gradients in the parameter dtype):

- ``allreduce``: every gradient element, 4 bytes;
- ``bf16``/``fp16``: every element in 2 bytes (PyTorch ``_compress_hook``: one all-reduce of the cast bucket);
- ``powersgd:rank=R``: each gradient viewed as ``n x m`` (``shape[0] x rest``), ``r = min(n, m, R)``; compressed
  when ``(n + m) r C < n m`` (``min_compression_rate`` C; torch ``_should_compress``), then its P (``n r``) and Q
  (``m r``) factors are all-reduced, else the whole tensor (Vogels et al. 2019, Algorithm 1; torch 2.13
  ``powerSGD_hook``, docs/research/sync-methods.md); steps before ``start_iter`` send the plain all-reduce;
- ``topk:ratio=F``: per gradient tensor ``k = ceil(F numel)`` fp32 values and int32 indices, all-gathered
  (each rank hands over its own ``8 k`` bytes; Lin et al. 2018, DGC; ``plait.run.sync.TopK``);
- ``quantize:bits=B``: per gradient tensor ``ceil(B numel / 8)`` bytes of packed codes and one fp32 scale,
  all-gathered (``plait.run.sync.Quantize``; 1-bit: EF-SignSGD's scaled sign, Karimireddy et al. 2019);
- ``local_sgd:every=H``: no gradient traffic; every H steps one all-reduce of every parameter (PyTorch
  ``PeriodicModelAverager``): per step, the parameters' bytes over H;
- ``diloco:every=H,...``: no gradient traffic; after every H inner steps one fp32 all-reduce of the
  pseudo-gradient, one value per parameter (Douillard et al. 2023, Algorithm 1; :class:`plait.run.sync.DiLoCo`);
- ``palsgd:every=H,...,warmup=W``: in the first W steps every gradient (an fp32 all-reduce), and at the W-th
  the parameters too; then DiLoCo's, every H steps (gradient and pseudo-synchronization steps alike, the warm-up
  counted: the authors' ``global_step``); a pseudo-synchronization step sends nothing
  (:class:`plait.run.sync.PALSGD`);
- ``pipe_sgd``: every step one fp32 all-reduce of the whole gradient, applied one step later (Li et al. 2018,
  Pipe-SGD, pipeline width 2; :class:`plait.run.sync.PipeSGD`);
- ``dreamddp:every=H``: no gradient traffic; each step one in-place all-reduce of the parameters of the units
  :mod:`plait.plan.partial` schedules at that step, every parameter once per period (Tang et al., DreamDDP, arXiv
  2502.11058; :class:`plait.run.sync.DreamDDP`): per step, the parameters' bytes over H on average.
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
from plait.plan.sync import AGGREGATED, ASYNCHRONOUS, COMPRESSED, INFREQUENT, MODELLED, Sync
from plait.workload.model import ModelSpec
from plait.workload.tensors import Shape, rank_shapes

GRAD_BYTES = 4
"""fp32 gradients and parameters (the replica's own copy; autocast computes in bf16)."""


def _gathered_pieces(sync: Sync, numel: int) -> tuple[float, float]:
    """Bytes one rank hands to each of the two all-gathers of one ``numel``-element tensor (top-k: fp32 values and
    int32 indices; quantize: packed codes and the fp32 scale)."""
    if sync.method == "topk":
        k = math.ceil(sync["ratio"] * numel)
        return 4.0 * k, 4.0 * k
    return float(-(-numel * int(sync["bits"]) // 8)), 4.0


def _powersgd_matrix(shape: Shape, rank: int, min_compression_rate: float) -> tuple[int, int, int, bool]:
    """(n, m, r, compressed) of one gradient as PowerSGD views it (torch ``_should_compress``)."""
    n = shape[0]
    m = math.prod(shape[1:]) if len(shape) > 1 else 1
    r = min(n, m, rank)
    return n, m, r, (n + m) * r * min_compression_rate < n * m


def payload_bytes(sync: Sync, named: list[tuple[str, Shape]], step: int | None = None, rank: int = 0,
                  replicas: int = 2, tokens: int = 0) -> float:
    """Bytes one replica hands to collectives (and, for the server and gossip methods, to point-to-point sends) in one
    step (``named``: the parameters' names and shapes, :func:`plait.workload.tensors.parameter_shapes`; ``step``:
    that step, counted from 0, for the methods whose traffic changes with it; ``None``: the mean over a period in
    steady state; ``rank`` of ``replicas``: for the methods whose ranks send different bytes)."""
    shapes = [s for _, s in named]
    elements = sum(math.prod(s) for s in shapes)
    if sync.method in AGGREGATED:  # parameter servers, switch aggregation: plait.cost.servers
        return float(servers.sent_bytes(sync, named, rank, replicas, tokens))
    if sync.method == "gossip":  # plait.cost.gossip
        return gossip.sent_bytes(sync, elements, rank, replicas, step)
    if sync.method in ASYNCHRONOUS:  # a worker's pushes to its servers (plait.run.async_train)
        return async_sgd.worker_bytes(sync, elements, step)
    if sync.method == "allreduce":
        return elements * GRAD_BYTES
    if sync.method in ("bf16", "fp16"):
        return elements * 2
    if sync.method == "powersgd":
        if step is not None and step < sync["start_iter"]:
            return elements * GRAD_BYTES
        matrices = (_powersgd_matrix(s, int(sync["rank"]), sync["min_compression_rate"]) for s in shapes)
        return sum((n + m) * r if compressed else n * m for n, m, r, compressed in matrices) * GRAD_BYTES
    if sync.method == "topk":
        return sum(sum(_gathered_pieces(sync, math.prod(s))) for s in shapes)
    if sync.method == "quantize":
        return sum(sum(_gathered_pieces(sync, math.prod(s))) for s in shapes)
    if sync.method == "local_sgd":
        every = sync.every
        if step is None:
            return elements * GRAD_BYTES / every
        return elements * GRAD_BYTES if step % every == 0 else 0.0  # PeriodicModelAverager: steps 0, H, 2H, ...
    if sync.method == "pipe_sgd":
        return elements * GRAD_BYTES  # every step's gradient, all-reduced while the next step computes
    if sync.method == "palsgd" and step is not None and step < sync["warmup"]:  # plain data parallelism, then
        return elements * GRAD_BYTES * (2 if step == sync["warmup"] - 1 else 1)  # the replicas averaged
    if sync.method in ("diloco", "palsgd"):
        every = sync.every
        if step is None:  # steady state (a warm-up is a vanishing share of a long run)
            return elements * GRAD_BYTES / every
        return elements * GRAD_BYTES if step % every == every - 1 else 0.0  # after H inner steps
    if sync.method == "dreamddp":  # each unit's parameters once per period, at its step (plait.plan.partial)
        if step is None:
            return elements * GRAD_BYTES / sync.every
        return step_elements(named, sync.every, step) * GRAD_BYTES
    raise ConfigError(f"dp_sync={sync.spec!r}: not modelled yet (modelled: {', '.join(MODELLED)})")


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


def method_costs(model: ModelSpec | None, cluster: Cluster, sync: Sync, cols: PlanColumns,
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
    if sync.method in INFREQUENT:
        return _averaging_costs(cluster, sync, cols, params)
    if sync.method in ASYNCHRONOUS:  # closed-network bounds, plait.cost.async_sgd
        return async_sgd.async_costs(cluster, sync, cols, params["dense"] + params["expert"], busy)
    groups = [(True, named)] if named is not None else _rank_shape_groups(model, cols, stage)  # type: ignore[arg-type]
    if sync.method in AGGREGATED:
        over = shown = extra = cols.zeros()
        for rows, held in groups:
            o, s, e = servers.aggregated_costs(cluster, sync, cols, held)
            over, shown, extra = (cols.xp.where(rows, new, old) for new, old in ((o, over), (s, shown), (e, extra)))
        return over, shown, extra
    if sync.method not in (*COMPRESSED, "pipe_sgd"):
        raise ConfigError(f"dp_sync={sync.spec!r}: not modelled yet (modelled: {', '.join(MODELLED)})")
    over = shown = extra = cols.zeros()
    for rows, held in groups:
        o, s, e = _gradient_costs(cluster, sync, cols, [shape for _, shape in held], busy)
        over, shown, extra = (cols.xp.where(rows, new, old) for new, old in ((o, over), (s, shown), (e, extra)))
    return over, shown, extra


def _gradient_costs(cluster: Cluster, sync: Sync, cols: PlanColumns, shapes: list[Shape],
                    busy: Any) -> tuple[Any, Any, Any]:
    """:func:`method_costs` of a per-step method whose rank sends gradient tensors of ``shapes``."""
    elements = sum(math.prod(s) for s in shapes)
    replicas, stride, full = cols.dp, cols["tp"], cols.full
    zero, memory_bw = full(0.0), memory_bytes_per_s(cluster.accelerator)
    split = (cols["tp"] > 1) | (cols["pp"] > 1)
    if sync.method in ("bf16", "fp16"):
        reduce = collective_s(cluster, "all_reduce", replicas, stride, full(elements * 2.0))
        return cols.xp.where(split, 0.0, reduce), cols.xp.where(split, reduce, 0.0), zero
    if sync.method == "pipe_sgd":  # the reduction runs behind the whole next step
        sent = elements * float(GRAD_BYTES)
        reduce = collective_s(cluster, "all_reduce", replicas, stride, full(sent))
        ring = 2.0 * (replicas - 1) / replicas * sent  # ring all-reduce, per rank (Patarasuk & Yuan 2009)
        engaged = cols.xp.minimum(reduce, engaged_s(ring, cluster.tiers[0].bandwidth_bytes_per_s(sent)))
        overlap = cluster.accelerator.efficiency.comm_overlap.value
        return zero, hidden_remainder(reduce, busy, overlap, cols.xp, engaged), full(2.0 * sent)
    if sync.method == "powersgd":
        p = q = plain = flops = streamed = 0.0
        for shape, count in Counter(shapes).items():
            n, m, r, compressed = _powersgd_matrix(shape, int(sync["rank"]), sync["min_compression_rate"])
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
    gathered = 0.0
    for numel, count in Counter(math.prod(s) for s in shapes).items():
        pieces = _gathered_pieces(sync, numel)
        gathered = gathered + count * sum(collective_s(cluster, "all_gather", replicas, stride, replicas * full(b))
                                          for b in pieces)
    # quantize also dequantizes and adds every rank's codes: two passes per rank
    streamed = (full(TOPK_PASSES * elements * FP32_PASS_BYTES / memory_bw) if sync.method == "topk"
                else (QUANTIZE_PASSES + 2 * replicas) * (elements * FP32_PASS_BYTES / memory_bw))
    largest = max(math.prod(s) for s in shapes)  # a dense sum is built one tensor at a time
    return zero, gathered + streamed, full((elements + largest) * float(FP32_PASS_BYTES))  # the residual, that sum


def _averaging_costs(cluster: Cluster, sync: Sync, cols: PlanColumns, params: dict[str, Any]) -> tuple[Any, Any, Any]:
    """:func:`method_costs` of the methods that average parameters every few steps."""
    replicas, full = cols.dp, cols.full
    zero, memory_bw = full(0.0), memory_bytes_per_s(cluster.accelerator)
    held = (params["dense"] + params["expert"]) * GRAD_BYTES  # what a rank averages
    if sync.method == "dreamddp":  # a whole period's averaging; plait.cost.batch hides it behind backward passes
        return collective_s(cluster, "all_reduce", replicas, cols["tp"], held), zero, zero  # in place: no buffer
    xp, whole = cols.xp, cols.is_("sharding", "none")
    shard = xp.where(whole, 1, cols["dp_shard"])  # cp = ep = 1 (plait.plan.rules)
    group, local = xp.where(whole, replicas, cols["dp_replicate"]), held / shard
    if sync.method == "gossip":  # neighbours exchange copies instead (plait.cost.gossip)
        return gossip.gossip_costs(cluster, sync, cols, group, shard * cols["tp"], local / GRAD_BYTES)
    average = collective_s(cluster, "all_reduce", group, shard * cols["tp"], local)  # replicas tp*shard apart
    if sync.method == "local_sgd":
        return zero, average / sync.every, local  # the flat buffer of the averaged params
    passes = DILOCO_PASSES * (local / GRAD_BYTES) * FP32_PASS_BYTES / memory_bw
    if sync.method == "palsgd":  # and a fraction p of steps pull toward the outer copy (plait.cost.batch)
        pull = sync["p"] * PULL_PASSES * (local / GRAD_BYTES) * FP32_PASS_BYTES / memory_bw
        return zero, (average + passes) / sync.every + pull, DILOCO_BUFFERS * local
    return zero, (average + passes) / sync.every, DILOCO_BUFFERS * local
