"""Evaluate many plans at once: step-time and memory breakdowns as columns.

step = slowest stage x micro-batches + pipeline bubble + exposed data-parallel sync
+ optimizer step (see :mod:`plait.cost.pipeline`, :mod:`plait.cost.dataparallel`).
The first, middle and last stages stand for all stages (interior stages are alike).
Components of the slowest stage are scaled by the micro-batch count so that the
breakdown sums to the step time. The single-plan estimator is a batch of one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from plait.cost.dataparallel import (
    exposed_sync_s,
    gradient_sync_s,
    kept_gathered,
    kept_sync_s,
    optimizer_step_s,
)
from plait.cost.flops import kept_flops_per_token, model_flops_per_token
from plait.cost.grad_accumulate import accumulate_s
from plait.cost.host import step_stall_s
from plait.cost.memory import (
    MEMORY_ITEMS,
    kept_stage_memory,
    kept_stage_params,
    stage_memory,
    stage_params,
)
from plait.cost.method_rows import dp_sync_costs, gradient_steps
from plait.cost.p2p import critical_hops
from plait.cost.params import stage_layer_counts
from plait.cost.pipeline import pipeline_time_s
from plait.cost.prepared import Prepared, prepare
from plait.cost.setup import Setup
from plait.cost.stage import COMPONENTS, kept_stage_time, stage_time
from plait.engine.facts import EngineFacts
from plait.frozen import direct_init
from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns
from plait.plan.ops import SCALAR
from plait.units import MIB
from plait.workload.model import ModelSpec

if TYPE_CHECKING:
    import numpy as np

Columns = dict[str, "np.ndarray"]
TIME_ITEMS = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "host", "pp_p2p", "pp_bubble", "fsdp_comm", "swap",
              "dp_comm", "optimizer")


@direct_init
@dataclass(frozen=True)
class StageSync:
    """Once-per-step costs of one stage (per row): its parameters, data-parallel traffic and optimizer step."""

    params: Columns
    """Parameters on one rank of the stage (:func:`plait.cost.memory.stage_params`)."""
    reduce_s: Any
    """Gradient reduction before overlap (:func:`plait.cost.dataparallel.gradient_sync_s`)."""
    gather_s: Any
    """ZeRO-1/2 weight all-gather before overlap."""
    optimizer_s: Any
    """The optimizer step (:func:`plait.cost.dataparallel.optimizer_step_s`)."""


@direct_init
@dataclass(frozen=True)
class BatchResult:
    """Per-row results: ``time[item]`` seconds, ``memory[item]`` bytes of the most loaded stage, and more."""

    cols: PlanColumns
    prepared: Prepared | None
    """The shared per-row quantities the results were built from (the simulator reuses a single plan's); ``None``
    in a :meth:`take` of the rows."""
    time: Columns
    memory: Columns
    memory_stage: np.ndarray
    model_flops_per_token: np.ndarray
    recompute_factor: np.ndarray

    @property
    def step_time_s(self) -> np.ndarray:
        """Seconds per optimizer step."""
        return sum(self.time[k] for k in TIME_ITEMS)  # type: ignore[return-value]

    def take(self, index: np.ndarray) -> BatchResult:
        """Rows ``index`` of a batch (without the shared quantities, which stay with the whole batch)."""
        return BatchResult(cols=self.cols.take(index), prepared=None,
                           time={k: v[index] for k, v in self.time.items()},
                           memory={k: v[index] for k, v in self.memory.items()}, memory_stage=self.memory_stage[index],
                           model_flops_per_token=self.model_flops_per_token[index],
                           recompute_factor=self.recompute_factor[index])


def _recompute_factor(model: ModelSpec, cols: PlanColumns) -> np.ndarray:
    """HFU/MFU ratio: full recompute adds one forward (1/3 of model FLOPs) on recomputed layers."""
    xp, layers = cols.xp, -(-model.num_layers // cols["pp"])
    share = xp.where(cols["recompute_layers"] < 0, 1.0, xp.minimum(cols["recompute_layers"], layers) / layers)
    return xp.where(cols.is_("recompute", "full"), 1.0 + share / 3.0, 1.0)


def _flops_per_token(model: ModelSpec, cluster: Cluster, cols: PlanColumns, framework: EngineFacts) -> np.ndarray:
    if cols.single is not None:
        return kept_flops_per_token(model, cols.single.seq_len)  # type: ignore[return-value]
    import numpy as np  # columns only: a single plan's estimate runs without numpy

    seqs, inverse = np.unique(cols["seq_len"], return_inverse=True)
    values = [model_flops_per_token(Setup(model=model, cluster=cluster, plan=replace(cols.plan(0), seq_len=int(s)),
                                          framework=framework)) for s in seqs]
    return np.array(values)[inverse.reshape(-1)]


def stage_class(model: ModelSpec, prepared: Prepared, stage: int) -> tuple[int, int, bool, bool]:
    """What a single plan's ``stage`` costs depend on: its (dense, MoE) layer counts and whether it holds the
    embedding or the head (kept per stage in ``prepared.memo``)."""
    memo = prepared.memo
    found = memo.get(stage)
    if found is None:
        pp = prepared.cols["pp"]
        found = memo[stage] = (*stage_layer_counts(model, pp, stage, SCALAR), stage == 0, stage == pp - 1)
    return found  # type: ignore[no-any-return]


def stage_pass(model: ModelSpec, cluster: Cluster, prepared: Prepared, stage: Any) -> tuple[Columns, Columns]:
    """(forward, backward) components of one micro-batch on ``stage`` (:func:`plait.cost.stage.stage_time`); of a
    single plan, kept per distinct stage in ``prepared.memo``: a stage's costs depend on it only through its
    :func:`stage_class` (arrays are computed every time). The memo is looked up before anything is built: a cold
    estimate asks for seven passes of four distinct stages."""
    kind = None
    if prepared.cols.xp.scalar:
        kind = stage_class(model, prepared, stage)
        found = prepared.memo.get(("pass", kind))
        if found is not None:
            return found  # type: ignore[no-any-return]
    overlap, asynchronous = cluster.accelerator.efficiency.comm_overlap.value, cluster.accelerator.asynchronous_launch
    if kind is not None and prepared.swap is None:  # one plan: kept across estimates (read only)
        fwd, bwd = kept_stage_time(model, prepared.cols, prepared.inner, prepared.fsdp, stage, kind,
                                   prepared.framework, overlap, asynchronous)
    else:
        fwd, bwd = stage_time(model, prepared.cols, prepared.inner, prepared.fsdp, stage, prepared.framework,
                              overlap, asynchronous, prepared.swap)
    if prepared.framework.grad_accumulate_pass:  # its own kernel after each backward (plait.cost.grad_accumulate)
        params = _stage_params(model, prepared, stage, kind)
        bwd = {**bwd, "compute": bwd["compute"] + accumulate_s(cluster, prepared.cols, params["dense"] + params["expert"],
                                                               prepared.inner.grad_bytes)}
    if kind is not None:
        prepared.memo[("pass", kind)] = fwd, bwd
    return fwd, bwd


def stage_sync(model: ModelSpec, cluster: Cluster, prepared: Prepared, stage: Any) -> StageSync:
    """Parameters, data-parallel traffic and optimizer step of ``stage`` (of a single plan, kept per distinct stage
    in ``prepared.memo``, as :func:`stage_pass`)."""
    cols, inner = prepared.cols, prepared.inner
    if not cols.xp.scalar:
        params = stage_params(model, cols, inner, stage)
        reduce, gather = gradient_sync_s(cluster, cols, params, inner.grad_bytes,
                                         prepared.framework.pipeline_keeps_gathered)
        return StageSync(params=params, reduce_s=reduce, gather_s=gather,
                         optimizer_s=optimizer_step_s(cluster, cols, params, inner.grad_bytes,
                                                      prepared.framework.adamw_per_tensor_ops))
    kind = stage_class(model, prepared, stage)
    found = prepared.memo.get(("sync", kind))
    if found is None:  # one plan: kept across estimates
        params = kept_stage_params(model, cols, inner, stage, kind)
        reduce, gather, optimizer = kept_sync_s(cluster, cols, params, inner.grad_bytes, prepared.framework)
        found = prepared.memo[("sync", kind)] = StageSync(params=params, reduce_s=reduce, gather_s=gather,
                                                         optimizer_s=optimizer)
    return found  # type: ignore[no-any-return]


def _stage_params(model: ModelSpec, prepared: Prepared, stage: Any,
                  kind: tuple[int, int, bool, bool] | None = None) -> Columns:
    """:func:`plait.cost.memory.stage_params` of ``stage``; of a single plan, kept by what it reads
    (:func:`plait.cost.memory.kept_stage_params`: its sync and its memory read the same; ``kind``: its
    :func:`stage_class`, when the caller has it)."""
    if prepared.cols.xp.scalar:  # one plan: kept across estimates (read only)
        return kept_stage_params(model, prepared.cols, prepared.inner, stage,
                                 kind if kind is not None else stage_class(model, prepared, stage))
    return stage_params(model, prepared.cols, prepared.inner, stage)


def _buckets(cols: PlanColumns, params: Any, grad_bytes: Any, layers: Any, framework: EngineFacts) -> Any:
    """Gradient reductions the backward pass can overlap: one per layer, or, for a replica all-reduce whose
    engine caps its buckets (PyTorch DDP, ``bucket_cap_mb``), no more than the buckets the gradients fill —
    a bucket fires when its last gradient is ready (Li et al. 2020, Sec. 3.2.3)."""
    xp = cols.xp
    layers = xp.where(kept_gathered(cols, framework.pipeline_keeps_gathered), 1, layers)  # one reduction at the end
    if not framework.ddp_bucket_mb:
        return layers
    filled = xp.maximum(1, xp.ceil(grad_bytes * (params["dense"] + params["expert"]) / (framework.ddp_bucket_mb * MIB)))
    return xp.where(cols.is_("sharding", "none"), xp.minimum(layers, filled), layers)


def peak_memory(model: ModelSpec, cluster: Cluster, prepared: Prepared) -> tuple[Columns, Any]:
    """(memory breakdown of the more loaded of the first and last stages, that stage: 0 or pp - 1) per row, before
    a synchronization method's own buffers (:func:`evaluate_batch` adds those)."""
    cols, inner, framework = prepared.cols, prepared.inner, prepared.framework
    xp, pp = cols.xp, cols["pp"]
    first_stage = cols.full(0)
    memory = kept_stage_memory if xp.scalar else stage_memory  # one plan: kept across estimates (read only)
    first = memory(model, cluster.accelerator, cols, inner, first_stage, framework,
                   _stage_params(model, prepared, first_stage))
    last = first if xp.scalar and pp == 1 else memory(model, cluster.accelerator, cols, inner, pp - 1, framework,
                                                      _stage_params(model, prepared, pp - 1))
    use_last = last["total"] > first["total"]
    if xp.scalar:  # one plan: the one stage's breakdown
        return {k: (last if use_last else first)[k] for k in _PEAK_KEYS}, (pp - 1 if use_last else 0)
    return {k: xp.where(use_last, last[k], first[k]) for k in _PEAK_KEYS}, xp.where(use_last, pp - 1, 0)


_PEAK_KEYS = (*MEMORY_ITEMS, "total", "inflight", "host_activations")


def _slowest_components(xp: Any, passes: list[tuple[Columns, Columns]], slowest: Any, m: Any) -> Columns:
    """Per component, ``m`` times the slowest stage's forward plus backward seconds; of one plan, that stage's sums
    alone (the value ``choose`` would pick, without a list of every stage's per component)."""
    if xp.scalar:
        fwd, bwd = passes[slowest]
        return {k: m * (fwd[k] + bwd[k]) for k in COMPONENTS}
    return {k: m * xp.choose(slowest, [f[k] + b[k] for f, b in passes]) for k in COMPONENTS}


def evaluate_batch(model: ModelSpec, cluster: Cluster, cols: PlanColumns, framework: EngineFacts,
                   prepared: Prepared | None = None, peak: tuple[Columns, Any] | None = None) -> BatchResult:
    """Evaluate every row of ``cols`` (rows must be valid under :mod:`plait.plan.rules`); for one plan
    (:meth:`PlanColumns.one`) every result is a float. ``prepared``, ``peak``: :func:`prepare` and
    :func:`peak_memory` of these rows, when the caller has them (a search screening rows by memory first,
    :mod:`plait.search.parts`)."""
    prepared = prepared if prepared is not None else prepare(model, cluster, cols, framework)
    cols, inner, p2p = prepared.cols, prepared.inner, prepared.p2p_s
    xp, pp = cols.xp, cols["pp"]
    stages = [cols.full(0), pp // 2, pp - 1]
    passes = [stage_pass(model, cluster, prepared, s) for s in stages]
    fwd = [xp.total(f.values()) for f, _ in passes]
    total = [f_s + xp.total(b.values()) for f_s, (_, b) in zip(fwd, passes)]
    slowest = xp.argmax(total)
    pick = lambda values: xp.choose(slowest, values)
    mean_over = lambda v: xp.where(pp > 2, (v[0] + v[2] + xp.maximum(pp - 2, 0) * v[1]) / pp, (v[0] + v[2]) / 2)
    mean, mean_fwd = xp.where(pp == 1, total[0], mean_over(total)), xp.where(pp == 1, fwd[0], mean_over(fwd))
    mean_weight = mean_over([b["compute"] / 2 for _, b in passes])  # ZB-H1's W, as plait.simulate.costs splits it
    busy, bubble = pipeline_time_s(cols, pick(total), mean, mean - mean_fwd, mean_weight)
    m = cols.num_micro_batches
    time = _slowest_components(xp, passes, slowest, m)
    summed = abs(xp.total(time.values()) - busy) <= 1e-12 + 1e-9 * abs(busy)
    assert summed if xp.scalar else summed.all(), "the components must sum to the busy time"
    time["pp_bubble"] = bubble
    time["pp_p2p"] = critical_hops(cols, prepared.framework) * p2p  # plait.cost.p2p
    slow_stage = xp.choose(slowest, stages)
    sync = stage_sync(model, cluster, prepared, slow_stage)
    n_dense, n_moe = stage_layer_counts(model, pp, slow_stage, xp)
    slow_bwd = pick([b["compute"] for _, b in passes])
    last_op = xp.where(cols.is_("schedule", "zb-h1") & (pp > 1), slow_bwd / 2,
                       pick([t - f for t, f in zip(total, fwd)])) / cols["vpp"]
    reduce, exposed, extra_bytes = dp_sync_costs(model, cluster, cols, sync.reduce_s, busy, sync.params, slow_bwd,
                                                slow_stage)
    time["dp_comm"] = exposed_sync_s(cols, reduce, sync.gather_s, last_op, pick(fwd) / cols["vpp"],
                                     _buckets(cols, sync.params, inner.grad_bytes, n_dense + n_moe,
                                              prepared.framework))
    time["optimizer"] = sync.optimizer_s
    time["host"] = time["host"] + step_stall_s(cluster, prepared.framework)  # the step's own syncs
    kept = gradient_steps(cols)  # PALSGD: only these steps compute; its pulls and outer steps are in `exposed`
    if kept is not None:
        time = {k: v * kept for k, v in time.items()}
    time["dp_comm"] = time["dp_comm"] + exposed
    memory, memory_stage = peak_memory(model, cluster, prepared) if peak is None else (dict(peak[0]), peak[1])
    memory["comm_buffers"] = memory["comm_buffers"] + extra_bytes
    memory["total"] = memory["total"] + extra_bytes
    return BatchResult(cols=cols, prepared=prepared, time=time, memory=memory, memory_stage=memory_stage,
                       model_flops_per_token=_flops_per_token(model, cluster, cols, prepared.framework)
                       * (1.0 if kept is None else kept),
                       recompute_factor=_recompute_factor(model, cols))

