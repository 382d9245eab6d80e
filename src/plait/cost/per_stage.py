"""A plan whose pipeline stages differ in recomputation, layer count, sharding and TP degree, costed one stage at a
time.

Each stage ``s`` is costed as the uniform plan it runs (:meth:`Plan.for_stage`: its own recomputation mode, ZeRO
stage and TP degree) on a model whose even split gives it its own layer count (``stage_layers[s] * pp`` layers: every layer
of such a model is alike, :mod:`plait.plan.per_stage`), through the same stage functions the uniform estimate uses
(:func:`plait.cost.batch.stage_pass`, :func:`plait.cost.memory.stage_memory`). Stage ``s`` keeps its own index, so
1F1B's ``pp - s`` micro-batches in flight (Narayanan et al. 2021, Sec. 2.2.1) and the embedding and head on the
ends stay where they are. The step is assembled as :func:`plait.cost.batch.evaluate_batch` assembles a uniform
one, over every stage rather than the first, middle and last: ``m`` times the slowest stage's forward and backward
plus the bubble of ``(p - 1)`` mean stage times (the 1F1B closed form, Narayanan et al. 2021, Sec. 2.2.2, in
:func:`plait.cost.pipeline.pipeline_time_s`), the point-to-point hops, and the slowest stage's exposed gradient
reduction and optimizer step (where stages shard differently, the longest of every stage's: each reduces over
its own data-parallel group); the memory is the most loaded of all stages.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from plait.cost.batch import (
    BatchResult,
    _buckets,
    _flops_per_token,
    _recompute_factor,
    stage_pass,
    stage_sync,
)
from plait.cost.dataparallel import exposed_sync_s
from plait.cost.host import step_stall_s
from plait.cost.links import collective_s
from plait.cost.memory import MEMORY_ITEMS, stage_memory
from plait.cost.pipeline import pipeline_time_s
from plait.cost.prepared import Prepared, prepare
from plait.cost.stage import COMPONENTS
from plait.engine.facts import EngineFacts
from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns
from plait.plan.ops import SCALAR
from plait.plan.per_stage import stage_degrees, stage_layer_list
from plait.plan.plan import Plan
from plait.workload.model import ModelSpec


@dataclass(frozen=True)
class StageView:
    """One stage of a per-stage plan as the uniform plan that costs it."""

    model: ModelSpec
    """A model whose even split over ``pp`` stages gives this stage its layer count (the model itself when the plan
    splits evenly)."""
    prepared: Prepared
    """The shared per-layer quantities of the stage's uniform plan (:meth:`Plan.for_stage`)."""
    layers: int
    """Transformer layers the stage holds."""


def stage_views(model: ModelSpec, cluster: Cluster, plan: Plan, framework: EngineFacts) -> list[StageView]:
    """Every stage of ``plan`` (its sequence length filled) as a :class:`StageView`; stages of equal mode and layer
    count share one."""
    layers = stage_layer_list(plan, model.num_layers)
    modes = plan.stage_recompute or (plan.recompute,) * plan.pp
    shardings = plan.stage_sharding or (plan.sharding,) * plan.pp
    degrees = stage_degrees(plan)
    known: dict[tuple[int, str, str, int], StageView] = {}
    views = []
    for stage in range(plan.pp):
        key = (layers[stage], modes[stage], shardings[stage], degrees[stage])
        if key not in known:
            known[key] = stage_view(model, cluster, plan.for_stage(stage), layers[stage], framework,
                                    resized=bool(plan.stage_layers))
        views.append(known[key])
    return views


def stage_view(model: ModelSpec, cluster: Cluster, uniform: Plan, layers: int, framework: EngineFacts, *,
               resized: bool) -> StageView:
    """A stage of ``layers`` layers of the uniform plan ``uniform``: on a model of ``layers * pp`` layers where
    ``resized``, else on ``model`` itself (whose even split gives the stage its ``layers``)."""
    model_s = replace(model, num_layers=layers * uniform.pp) if resized else model
    return StageView(model=model_s, layers=layers,
                     prepared=prepare(model_s, cluster, PlanColumns.one(uniform), framework))


def evaluate_per_stage(model: ModelSpec, cluster: Cluster, cols: PlanColumns, framework: EngineFacts) -> BatchResult:
    """The step-time and memory breakdowns of the one per-stage plan ``cols.single`` (its sequence length filled,
    checked by :func:`plait.plan.per_stage.check_stages`), as :func:`plait.cost.batch.evaluate_batch` returns them
    for one plan."""
    plan = cols.single
    assert plan is not None and plan.per_stage and plan.vpp == 1 and plan.seq_len > 0
    views = stage_views(model, cluster, plan, framework)
    passes = [stage_pass(v.model, cluster, v.prepared, s) for s, v in enumerate(views)]
    fwd = [SCALAR.total(f.values()) for f, _ in passes]
    total = [f_s + SCALAR.total(b.values()) for f_s, (_, b) in zip(fwd, passes)]
    slow = max(range(plan.pp), key=total.__getitem__)
    pp, m = plan.pp, cols.num_micro_batches
    mean, mean_fwd = sum(total) / pp, sum(fwd) / pp
    mean_weight = sum(b["compute"] / 2 for _, b in passes) / pp  # ZB-H1's W, as evaluate_batch splits it
    busy, bubble = pipeline_time_s(cols, total[slow], mean, mean - mean_fwd, mean_weight)
    f_slow, b_slow = passes[slow]
    time = {k: m * (f_slow[k] + b_slow[k]) for k in COMPONENTS}
    assert abs(sum(time.values()) - busy) <= 1e-12 + 1e-9 * abs(busy), "the components must sum to the busy time"
    time["pp_bubble"] = bubble
    zero_bubble = plan.schedule == "zb-h1"
    hops = 2 * (pp - 1) + 2 * min(max(m - 2, 0), pp - 1) if zero_bubble else 2 * m  # as evaluate_batch counts them
    time["pp_p2p"] = hops * boundary_p2p_s(cluster, views)
    # Each stage reduces over its own data-parallel group and steps its own optimizer after its last backward; where
    # stages shard alike the slowest stage's tail stands for all (as evaluate_batch assembles it), where they shard
    # differently the longest tail ends the step.
    tails = [stage_tail(cluster, views[s], s, passes[s], fwd[s], total[s], zero_bubble, framework)
             for s in (range(pp) if len(set(plan.stage_sharding)) > 1 else (slow,))]
    time["dp_comm"], time["optimizer"] = max(tails, key=sum)
    time["host"] = time["host"] + step_stall_s(cluster, framework)
    memories = [stage_memory(v.model, cluster.accelerator, v.prepared.cols, v.prepared.inner, s, framework)
                for s, v in enumerate(views)]
    peak = max(range(pp), key=lambda s: memories[s]["total"])
    memory = {k: memories[peak][k] for k in (*MEMORY_ITEMS, "total", "inflight", "host_activations")}
    hardware = sum(v.layers * _recompute_factor(v.model, v.prepared.cols) for v in views) / sum(v.layers for v in views)
    return BatchResult(cols=cols, prepared=views[0].prepared, time=time, memory=memory, memory_stage=peak,
                       model_flops_per_token=_flops_per_token(model, cluster, cols, framework),
                       recompute_factor=hardware)


def boundary_p2p_s(cluster: Cluster, views: list[StageView]) -> float:
    """One hop between neighbouring stages: the slowest boundary's. Megatron's scatter/gather optimisation
    (Narayanan et al., SC 2021, Sec. 4.1) splits the activation over the TP ranks, each sending its slice over its
    own link, and all-gathers it over the receiving stage's scale-up links (not counted, as for a uniform plan,
    :func:`plait.cost.prepared.prepare`). Between stages of TP degrees ``a`` and ``b`` the ``min(a, b)`` rank pairs of
    the narrower stage each carry ``1/min(a, b)`` of it, between ranks ``dp * cp * max(a, b)`` apart (a stage's
    ranks are contiguous, :attr:`plait.plan.plan.Plan.stage_tp`; assumed: the pair farthest apart paces the hop,
    as ``dp * cp * tp`` apart for a uniform plan). Every boundary is crossed by every micro-batch, so the slowest
    one paces the hops as the slowest stage paces the compute (assumed)."""
    hops = []
    for a, b in zip(views, views[1:]):
        ca, cb = a.prepared.cols, b.prepared.cols
        narrower = a if ca["tp"] <= cb["tp"] else b
        if ca["tp"] == cb["tp"]:
            hops.append(float(narrower.prepared.p2p_s))  # the uniform plan's own hop
            continue
        stride = ca.dp * ca["cp"] * max(ca["tp"], cb["tp"])
        hops.append(float(collective_s(cluster, "p2p", ca["pp"], stride, narrower.prepared.inner.p2p_bytes)))
    return max(hops)


def stage_tail(cluster: Cluster, view: StageView, stage: int, passes: tuple[dict, dict], fwd_s: float, total_s: float,
          zero_bubble: bool, framework: EngineFacts) -> tuple[float, float]:
    """Stage ``stage``'s exposed gradient synchronization and optimizer step after its last backward, as
    :func:`plait.cost.batch.evaluate_batch` costs the slowest stage's."""
    sync = stage_sync(view.model, cluster, view.prepared, stage)
    last_op = passes[1]["compute"] / 2 if zero_bubble else total_s - fwd_s
    buckets = _buckets(view.prepared.cols, sync.params, view.prepared.inner.grad_bytes, view.layers, framework)
    exposed = exposed_sync_s(view.prepared.cols, sync.reduce_s, sync.gather_s, last_op, fwd_s, buckets)
    return exposed, sync.optimizer_s
