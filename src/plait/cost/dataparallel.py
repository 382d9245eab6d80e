"""Once-per-step data-parallel traffic and the optimizer step, column-wise over plans.

- No sharding: a gradient all-reduce over the ``dp * cp`` ranks holding one model shard
  (PyTorch DDP, Li et al. 2020, Sec. 3.2; Megatron reduces over data and context ranks).
- ZeRO-1/2 (Megatron distributed optimizer): reduce-scatter of gradients, then an
  all-gather of updated bf16 weights (Rajbhandari et al. 2020, Sec. 5.1-5.2).
- ZeRO-3/FSDP: gradients are reduce-scattered per micro-batch (costed per layer in
  :mod:`plait.cost.stage`); with HSDP the replicas all-reduce their shards once. A pipeline stage that stays
  gathered over the step (PyTorch pipelining with FSDP2) gathers once and reduce-scatters once, after its last
  backward, not overlapped (``perform_reduce_grad``).
- Overlap: with gradient accumulation only the last micro-batch's backward can hide the
  reduction (DDP ``no_sync``, Li et al. 2020, Sec. 3.2.4); the weight all-gather hides
  behind the next step's first forward (Megatron ``--overlap-param-gather``).
- Optimizer: a memory-bound pass that reads the gradient and reads and writes master
  weights and moments, then writes the bf16 copy; offloaded, gradients go down and
  weights come back over PCIe and the CPU streams the same optimizer bytes through host
  DRAM (ZeRO-Offload, Ren et al. 2021, Sec. 4; its optional delayed update is not assumed). An engine whose AdamW
  is a per-tensor loop of eager ops streams that loop's bytes instead (:mod:`plait.cost.optimizer_loop`).
- Sequence parallelism: the norm weights are replicated over TP but see only a slice of the
  sequence, so their gradients are partial sums; they are all-reduced over the TP group once per
  step, in one flat buffer, before the optimizer (Megatron-LM ``_allreduce_layernorm_grads`` in
  megatron/core/distributed/finalize_model_grads.py; plait run does the same).
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from plait.cost.compute import memory_bytes_per_s
from plait.cost.links import collective_s
from plait.cost.memory import optimizer_bytes_per_param, param_bytes, shard_groups
from plait.cost.optimizer_loop import COMPOSER_ADAMW_BYTES_PER_PARAM
from plait.engine.facts import EngineFacts
from plait.hardware.cluster import Cluster
from plait.kept import Kept
from plait.plan.columns import PlanColumns, per_plan
from plait.plan.groups import Group, expert_dp_group

if TYPE_CHECKING:
    import numpy as np

Columns = dict[str, "np.ndarray"]


def kept_gathered(cols: PlanColumns, pipeline_keeps_gathered: bool) -> np.ndarray:
    """Rows whose ZeRO-3 stages stay gathered over the step's micro-batches and reduce-scatter once after the last
    backward (:attr:`plait.engine.facts.EngineFacts.pipeline_keeps_gathered`: PyTorch pipelining with FSDP2)."""
    dense_group, _ = shard_groups(cols)
    kept = (cols["pp"] > 1) & cols.is_("sharding", "zero3") & (dense_group > 1)
    return kept if pipeline_keeps_gathered else kept & False


def gradient_sync_s(cluster: Cluster, cols: PlanColumns, params: Columns, grad_bytes: np.ndarray,
                    pipeline_keeps_gathered: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(gradient reduction, weight all-gather) seconds per step and row, before overlap; a ZeRO-3 pipeline stage
    that stays gathered (:func:`kept_gathered`) gathers its parameters and reduce-scatters its gradients here, once
    per step, instead of per micro-batch and layer (:mod:`plait.cost.stage`)."""
    xp = cols.xp
    f = _sync_rows(cols)
    tp, dense_group, expert_group, expert_stride = f.tp, f.dense_group, f.expert_group, f.expert_dp.stride
    # One plan's terms with no bytes or no peers are the 0.0 their collectives would give, not costed (a single
    # plan's sync is costed once per distinct pipeline stage; most plans have one or two of the eight collectives).
    known_zero = xp.scalar and not f.whole
    # The ep consecutive ranks of the dp x cp ranks of a stage hold different experts; the expert-data-parallel
    # group holds the same ones (plait.plan.groups, after Megatron-Core's expert rank generator).
    plain = 0.0 if known_zero else (
        collective_s(cluster, "all_reduce", f.replicas, tp, xp.where(f.whole, grad_bytes * params["dense"], 0.0))
        + collective_s(cluster, "all_reduce", f.expert_dp.size, expert_stride,
                       xp.where(f.whole, grad_bytes * params["expert"], 0.0)))
    across = 0.0
    if not xp.scalar or (f.dp_replicate > 1 and not (f.none or f.apart)):
        sharded = params["dense"] / dense_group + params["expert"] / expert_group
        across = collective_s(cluster, "all_reduce", f.dp_replicate, tp * dense_group,
                              xp.where(f.none | f.apart, 0.0, grad_bytes * sharded))
    once = f.zero12 | f.gathered[pipeline_keeps_gathered]
    if xp.scalar and not once:
        return plain + across + 0.0, 0.0  # the reduce and gather of no parameters: 0.0 + 0.0 each
    dense, expert = xp.where(once, params["dense"], 0.0), xp.where(once, params["expert"], 0.0)
    # Experts are sharded over their own data-parallel group (Megatron-Core's expert-data-parallel group: the
    # ranks of a replica holding the same experts), whose members are tp * ep ranks apart (plait.plan.groups).
    reduce = (collective_s(cluster, "reduce_scatter", dense_group, tp, grad_bytes * dense)
              + collective_s(cluster, "reduce_scatter", expert_group, expert_stride, grad_bytes * expert))
    gather = (collective_s(cluster, "all_gather", dense_group, tp, f.param_bytes * dense)
              + collective_s(cluster, "all_gather", expert_group, expert_stride, f.param_bytes * expert))
    return plain + across + reduce, gather


class _SyncRows(NamedTuple):
    """What :func:`gradient_sync_s` reads of the plan, whatever the stage (:func:`_sync_rows`)."""

    tp: Any
    replicas: Any
    """Ranks replicating a shard (``dp * cp``)."""
    none: Any
    """Unsharded rows."""
    apart: Any
    """Rows whose replicas average apart (every few steps: no gradient all-reduce across replicas)."""
    whole: Any
    """Rows all-reducing whole gradients."""
    zero12: Any
    dense_group: Any
    expert_group: Any
    expert_dp: Group
    dp_replicate: Any
    param_bytes: Any
    gathered: tuple[Any, Any]
    """:func:`kept_gathered` without and with ``pipeline_keeps_gathered``."""


@per_plan
def _sync_rows(cols: PlanColumns) -> _SyncRows:
    """The plan's part of :func:`gradient_sync_s`, which a single plan asks for once per distinct stage (kept on its
    columns: one call, where each quantity would be one or more)."""
    xp = cols.xp
    none = cols.is_("sharding", "none")
    # Replicas that average parameters every few steps instead (local SGD, DiLoCo: plait.cost.sync) all-reduce no
    # gradients across replicas; with sharding, only the in-replica reduce-scatter stays.
    apart = cols.sync_rows(lambda s: s.infrequent)
    dense_group, expert_group = shard_groups(cols)
    return _SyncRows(tp=cols["tp"], replicas=cols.dp * cols["cp"], none=none, apart=apart,
                     whole=none & xp.not_(apart), zero12=cols.is_("sharding", "zero1") | cols.is_("sharding", "zero2"),
                     dense_group=dense_group, expert_group=expert_group, expert_dp=expert_dp_group(cols),
                     dp_replicate=cols["dp_replicate"], param_bytes=param_bytes(cols),
                     gathered=(kept_gathered(cols, False), kept_gathered(cols, True)))


def exposed_sync_s(cols: PlanColumns, reduce: np.ndarray, gather: np.ndarray, last_backward_s: np.ndarray,
                   first_forward_s: np.ndarray, buckets: np.ndarray) -> np.ndarray:
    """Data-parallel seconds on the critical path after overlap, for the gradient reduction and weight all-gather
    of :func:`gradient_sync_s`.

    Gradients are reduced in one bucket per layer, each ready as the last backward passes it
    (PyTorch DDP buckets, Li et al. 2020, Sec. 3.2.3): with ``n`` equal buckets of ``r/n`` and a
    last backward of ``L``, the reduction ends ``max(r/n, r - L + L/n)`` after that backward.
    """
    xp = cols.xp
    n = xp.maximum(buckets, 1)
    tail = xp.where(reduce > 0, xp.maximum(reduce / n, reduce - last_backward_s + last_backward_s / n), 0.0)
    overlapped = tail + xp.maximum(0.0, gather - first_forward_s)
    return xp.where(cols["overlap_grad_reduce"], overlapped, reduce + gather)


def optimizer_step_s(
    cluster: Cluster, cols: PlanColumns, params: Columns, grad_bytes: np.ndarray, adamw_per_tensor_ops: bool = False
) -> np.ndarray:
    """Seconds of the optimizer step on one rank, with the sequence-parallel norm-gradient all-reduce before it;
    ``adamw_per_tensor_ops``: an AdamW plan's update on the GPU streams the bytes of Composer's per-tensor loop
    (:mod:`plait.cost.optimizer_loop`) instead of the fused pass (:attr:`EngineFacts.adamw_per_tensor_ops`)."""
    xp, acc, f = cols.xp, cluster.accelerator, _optimizer_rows(cols)
    local = xp.where(f.none, params["dense"] + params["expert"],
                     params["dense"] / f.dense_group + params["expert"] / f.expert_group)
    streamed = grad_bytes + 2 * f.optimizer_bytes + f.param_bytes
    if adamw_per_tensor_ops:
        streamed = xp.where(f.adamw, COMPOSER_ADAMW_BYTES_PER_PARAM, streamed)
    step = on_gpu = local * streamed / memory_bytes_per_s(acc)
    if not xp.scalar or f.offload_optimizer:  # one plan's offloaded step only where it is the one taken
        # Optimizer offload alone: gradients down, updated weights up, once per step (ZeRO-Offload). With parameters
        # offloaded too, both already cross PCIe per layer (plait.cost.fsdp_layer.fsdp_layer_s) and stay on the host.
        transfer = xp.where(f.offload_params, 0.0,
                            local * (grad_bytes + f.param_bytes) / (acc.pcie_bandwidth_gb_per_s * 1e9))
        host_update = local * (grad_bytes + 2 * f.optimizer_bytes) / cluster.host_memory_bytes_per_s_per_gpu
        step = xp.where(f.offload_optimizer, transfer + host_update, on_gpu)
    sp_norms = xp.where(f.sp_norms, grad_bytes * params["norms"], 0.0)
    return step + collective_s(cluster, "all_reduce", f.tp, 1, sp_norms)


class _OptimizerRows(NamedTuple):
    """What :func:`optimizer_step_s` reads of the plan, whatever the stage (:func:`_optimizer_rows`)."""

    none: Any
    dense_group: Any
    expert_group: Any
    offload_params: Any
    offload_optimizer: Any
    param_bytes: Any
    optimizer_bytes: Any
    """:func:`plait.cost.memory.optimizer_bytes_per_param`."""
    adamw: Any
    sp_norms: Any
    """Rows all-reducing their norm weights' gradients over TP (sequence parallelism, ``tp > 1``)."""
    tp: Any


@per_plan
def _optimizer_rows(cols: PlanColumns) -> _OptimizerRows:
    """The plan's part of :func:`optimizer_step_s` (kept on a single plan's columns, as :func:`_sync_rows`)."""
    dense_group, expert_group = shard_groups(cols)
    return _OptimizerRows(none=cols.is_("sharding", "none"), dense_group=dense_group, expert_group=expert_group,
                          offload_params=cols["offload_params"], offload_optimizer=cols["offload_optimizer"],
                          param_bytes=param_bytes(cols), optimizer_bytes=optimizer_bytes_per_param(cols),
                          adamw=cols.is_("optimizer", "adamw"), sp_norms=cols["sp"] & (cols["tp"] > 1),
                          tp=cols["tp"])


SYNC_FIELDS = ("tp", "sp", "pp", "cp", "ep", "dp_replicate", "dp_shard", "sharding", "precision", "optimizer",
               "master_weights", "offload_params", "offload_optimizer")
"""The plan fields :func:`gradient_sync_s` and :func:`optimizer_step_s` read but the synchronization method (theirs,
:func:`shard_groups`, :func:`param_bytes`, :func:`optimizer_bytes_per_param`, :func:`kept_gathered` and
:func:`plait.plan.groups.expert_dp_group`)."""
_SYNC_VALUES = attrgetter(*SYNC_FIELDS)
_SYNC: Kept[tuple[Any, Any, Any]] = Kept(256)


def kept_sync_s(cluster: Cluster, cols: PlanColumns, params: Columns, grad_bytes: float,
                framework: EngineFacts) -> tuple[Any, Any, Any]:
    """(gradient reduction, weight all-gather, optimizer step) seconds of one plan's stage (:func:`gradient_sync_s`,
    :func:`optimizer_step_s`, with the engine's facts ``framework``), kept for the last 256 by the plan's
    :data:`SYNC_FIELDS`, ``grad_bytes`` and the identity of the cluster, the stage's parameters (kept themselves,
    :func:`plait.cost.memory.kept_stage_params`), the engine's facts and the plan's synchronization method, which the
    entry holds (the same object is the same value, its id not reused while it lives)."""
    assert cols.single is not None, "one plan's columns"
    method = cols.methods[cols["dp_sync"]]
    key = (id(cluster), id(params), id(framework), id(method), grad_bytes, _SYNC_VALUES(cols.single))

    def compute() -> tuple[Any, Any, Any]:
        reduce, gather = gradient_sync_s(cluster, cols, params, grad_bytes, framework.pipeline_keeps_gathered)
        return reduce, gather, optimizer_step_s(cluster, cols, params, grad_bytes, framework.adamw_per_tensor_ops)

    return _SYNC.get(key, (cluster, params, framework, method), compute)
