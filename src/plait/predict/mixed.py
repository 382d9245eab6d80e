"""Predict a plan over a mixed cluster (:mod:`plait.plan.mixed`) by costing each group on its own view.

Every number comes from the homogeneous cost model: a group is costed on :func:`plait.hardware.mixed.group_view`,
a cluster of that group's devices whose outer tier is the join between groups, so its collectives cross the
slower fabric as the real job's do.

- ``data`` split: a group's replicas run their local batch on the group's devices, and every replica joins the
  one gradient reduction of the step. The step ends when the slowest group's reduction ends, so the step time
  is the largest of the groups' own step times — each costed as if all ``dp`` replicas were of that group's
  kind with its local batch (same reduction, its own compute; its own micro-batch and recomputation where its share
  gives them) — and a faster group idles for the difference
  (Poplar, Zhang et al. 2023, Sec. 3: a heterogeneous step waits for its slowest worker). With ``local_sgd`` a
  group takes its own number of local steps per averaging round (000-17), so a round lasts the largest of
  ``local_steps x`` step time and carries every group's ``local_steps x batch`` sequences. Under FSDP2, groups that
  run different numbers of micro-batches on hosts that block in each collective (CPU ranks) are coupled block by
  block by the all-gathers of the first forward and the reduce-scatters of the last backward, so the step is at
  least :func:`plait.predict.coupled.coupled_step_s` of them (:func:`_coupled_s`). An asynchronous
  method (``async_ps``, ``easgd``) waits for nobody: the workers' rates add up (:func:`_asynchronous`).
- ``pipeline`` split: each stage's forward, backward, data-parallel reduction and optimizer come from its
  group's view with its own layer count, and the per-rank schedule is simulated by the same event sweep as
  homogeneous pipelines (:func:`plait.simulate.pipeline.simulate_pipeline`): the slowest stage sets the
  steady-state rate and the fill and drain follow from every stage's time. Where groups take their own TP degree
  (:attr:`plait.plan.plan.Plan.stage_tp`, one per group), each stage is costed at its group's degree on its group's
  view, and every boundary between stages of different degree as :func:`plait.cost.per_stage.boundary_p2p_s`
  costs it (Megatron's scatter/gather, Narayanan et al. SC 2021 Sec. 4.1), on both sides' views, the slowest
  hop pacing all (as for one device kind).
"""

from __future__ import annotations

from dataclasses import replace

from plait.cost.prepared import prepare
from plait.cost.estimate import Estimate, TimeBreakdown
from plait.cost.memory import stage_memory
from plait.cost.per_stage import StageView, boundary_p2p_s
from plait.engine.engine import Engine
from plait.hardware.mixed import MixedCluster, group_view
from plait.job import Job
from plait.plan.mixed import GroupShare, MixedPlan, check_mixed_plan, share_layout, variant_label
from plait.plan.per_stage import stage_degrees
from plait.plan.plan import Plan
from plait.plan.rules import require_positive
from plait.predict.coupled import coupled_step_s
from plait.predict.estimate import predict
from plait.predict.mixed_result import GroupTime, MixedEstimate, mixed_price
from plait.predict.mixed_sites import join_ratio, site_view
from plait.simulate.costs import pipeline_costs
from plait.simulate.pipeline import PipelineCosts, simulate_pipeline
from plait.workload.model import ModelSpec


def mixed_layout(model: ModelSpec, layout: Plan) -> Plan:
    """``layout``, the plan a mixed plan shares among groups, its sequence length filled from ``model`` where it
    leaves it 0: once, where a mixed plan enters (the command line's layout options, a run's uneven split), as
    :meth:`plait.job.Job.build` does for a plan, so :func:`estimate_mixed` and a balancing's many estimates of one
    layout take it filled. The mixed planner's layouts come from searches, whose plans carry their space's length."""
    require_positive(layout)
    return layout.with_seq_len(model.seq_len)


def estimate_mixed(model: ModelSpec, cluster: MixedCluster, mixed: MixedPlan, *, engine: Engine) -> MixedEstimate:
    """Predict step time, per-group idle time and memory of ``mixed`` on ``cluster`` (its layout's sequence length
    filled: :func:`mixed_layout`)."""
    assert mixed.plan.seq_len > 0, "a mixed plan's sequence length is filled where it enters (mixed_layout)"
    check_mixed_plan(mixed, model, cluster)
    sync = mixed.plan.dp_sync
    if sync.group_local_steps:  # a group without its own local steps takes the plan's
        every = sync.every
        mixed = replace(mixed, shares=tuple(s if s.local_steps > 1 else replace(s, local_steps=every)
                                            for s in mixed.shares))
    if mixed.split == "data":
        return (_asynchronous if sync.asynchronous else _data)(model, cluster, mixed, engine)
    return _pipeline(model, cluster, mixed, engine)


def group_estimate(model: ModelSpec, cluster: MixedCluster, mixed: MixedPlan, share: GroupShare,
                   engine: Engine) -> Estimate:
    """``share``'s step as the homogeneous estimator predicts it: every replica of its kind, with its batch."""
    return predict(group_job(model, cluster, mixed, share, engine))


def group_job(model: ModelSpec, cluster: MixedCluster, mixed: MixedPlan, share: GroupShare, engine: Engine) -> Job:
    """``share``'s job: the layout (its group's own micro-batch and recomputation where the share gives them:
    :func:`plait.plan.mixed.share_layout`) on its group's view, every replica with its local batch."""
    plan = share_layout(mixed.plan, share)
    local = share.batch // (share.num_gpus // plan.model_parallel)
    plan = replace(plan, global_batch=local * plan.dp)
    if plan.dp_sync.group_local_steps:  # each group averages after its own local steps
        plan = replace(plan, dp_sync=replace(plan.dp_sync, every=share.local_steps))
    view = group_view(cluster, cluster.group(share.group), mixed.num_gpus)
    if plan.dp_sync.site_aware and join_ratio(cluster) is not None:  # the groups as sites joined by a slower tier
        view = site_view(cluster, cluster.group(share.group), mixed.num_gpus)
    return Job.build(model, view, plan, engine)


def _data(model: ModelSpec, cluster: MixedCluster, mixed: MixedPlan, engine: Engine) -> MixedEstimate:
    jobs = [group_job(model, cluster, mixed, s, engine) for s in mixed.shares]
    ests = [predict(job) for job in jobs]
    rounds = [s.local_steps * e.step_time_s for s, e in zip(mixed.shares, ests, strict=True)]
    step = max(max(rounds), _coupled_s(model, jobs, ests))
    groups = tuple(GroupTime(group=s.group, accelerator=cluster.group(s.group).cluster.accelerator.name,
                             num_gpus=s.num_gpus,
                             work=f"b{s.batch}" + (f" x{s.local_steps}" if s.local_steps > 1 else "") + variant_label(s),
                             busy_s=r, idle_s=step - r, memory_bytes=e.memory.total_bytes,
                             capacity_bytes=e.memory.capacity_bytes, precision=e.plan.precision)
                   for s, e, r in zip(mixed.shares, ests, rounds, strict=True))
    seq = mixed.plan.seq_len
    slowest = ests[rounds.index(max(rounds))]
    return MixedEstimate(
        model_name=model.name, cluster_name=cluster.name, plan=mixed, step_time_s=step,
        tokens_per_step=sum(s.local_steps * s.batch for s in mixed.shares) * seq, groups=groups, time=slowest.time,
        model_flops_per_token=slowest.model_flops_per_step / slowest.tokens_per_step,
        peak_flops=sum(e.peak_flops_per_gpu * s.num_gpus for s, e in zip(mixed.shares, ests, strict=True)),
        price_per_hour_usd=mixed_price(cluster, mixed), steps_multiplier=max(e.steps_multiplier for e in ests),
        steps_multiplier_known=all(e.convergence.known for e in ests))


def _coupled_s(model: ModelSpec, jobs: list[Job], ests: list[Estimate]) -> float:
    """The step of FSDP2 groups that run different numbers of micro-batches, coupled at their per-block collectives
    (:mod:`plait.predict.coupled`), where a group's host blocks in each collective (a device without an asynchronous
    launch queue: CPU ranks on gloo); 0 where no such coupling holds (no FSDP2 across the groups, replicas that
    average apart, equal micro-batch counts, whose step is the slowest group's, or only devices whose hosts enqueue
    collectives on streams and run ahead: there FSDP2 issues the gathers ahead of the compute, a looser coupling
    not modelled)."""
    plan = jobs[0].plan
    counts = [job.plan.num_micro_batches for job in jobs]
    blocking = any(not job.cluster.accelerator.asynchronous_launch for job in jobs)
    if not plan.fsdp_managed or plan.dp_sync.infrequent or plan.pp > 1 or len(set(counts)) == 1 or not blocking:
        return 0.0
    costs = [pipeline_costs(job) for job in jobs]  # pp = 1: the whole model is the one stage
    forward, backward = [c.forward_s[0] for c in costs], [c.backward_s[0] for c in costs]
    rest = [max(e.step_time_s - m * (f + b), 0.0) for e, m, f, b in zip(ests, counts, forward, backward, strict=True)]
    return coupled_step_s(forward, backward, counts, rest, model.num_layers, regathered=plan.sharding == "zero3")


def _asynchronous(model: ModelSpec, cluster: MixedCluster, mixed: MixedPlan, engine: Engine) -> MixedEstimate:
    """An asynchronous method's data split: nobody waits, so every worker iterates at its own group's pace.

    A group's estimate (every replica of its kind, :mod:`plait.cost.async_sgd`) gives its worker's iteration,
    ``s_g`` seconds (a step of ``dp`` iterations of equal workers); the workers' update rate adds up,
    ``X = sum_g n_g / s_g``, which is exact where no server is the bottleneck and the servers' own bound where each
    group's step is (``s_g = dp D``) — the closed network of :mod:`plait.cost.async_sgd` with unequal think times
    (Lazowska et al. 1984, Sec. 5.2); a staleness bound short of no bound holds the fast workers, so over a long
    run every worker steps at the slowest's pace (Ho et al. 2013). A step (``dp`` iterations) takes ``dp / X``. The steps
    multiplier is the method's at ``dp`` replicas, whatever their speeds (:mod:`plait.plan.async_convergence`)."""
    ests = [group_estimate(model, cluster, mixed, s, engine) for s in mixed.shares]
    plan = mixed.plan
    workers = [s.num_gpus // plan.model_parallel for s in mixed.shares]
    rate = sum(n / e.step_time_s for n, e in zip(workers, ests, strict=True))
    if plan.dp_sync.holds_fast_workers:  # a staleness bound: in the long run every worker at the slowest's pace
        rate = plan.dp / max(e.step_time_s for e in ests)
    step = plan.dp / rate
    groups = tuple(GroupTime(group=s.group, accelerator=cluster.group(s.group).cluster.accelerator.name,
                             num_gpus=s.num_gpus, work=f"b{s.batch} async", busy_s=e.step_time_s, idle_s=0.0,
                             memory_bytes=e.memory.total_bytes, capacity_bytes=e.memory.capacity_bytes,
                             precision=e.plan.precision)
                   for s, e in zip(mixed.shares, ests, strict=True))
    slowest = max(ests, key=lambda e: e.step_time_s)
    return MixedEstimate(
        model_name=model.name, cluster_name=cluster.name, plan=mixed, step_time_s=step,
        tokens_per_step=plan.global_batch * plan.seq_len, groups=groups, time=slowest.time,
        model_flops_per_token=slowest.model_flops_per_step / slowest.tokens_per_step,
        peak_flops=sum(e.peak_flops_per_gpu * s.num_gpus for s, e in zip(mixed.shares, ests, strict=True)),
        price_per_hour_usd=mixed_price(cluster, mixed), steps_multiplier=slowest.steps_multiplier,
        steps_multiplier_known=slowest.convergence.known)


def _pipeline(model: ModelSpec, cluster: MixedCluster, mixed: MixedPlan, engine: Engine) -> MixedEstimate:
    plan = mixed.plan
    per_stage, members, stage, hops = [], [], 0, []
    wide = max(mixed.num_gpus, plan.dp * plan.cp * plan.pp * max(stage_degrees(plan)))  # spans each stage's costing
    views = [group_view(cluster, cluster.group(share.group), wide) for share in mixed.shares]
    for share, view in zip(mixed.shares, views, strict=True):
        for layers in share.layers:
            variant = replace(model, num_layers=layers * plan.pp)  # stage `stage` of an even split holds `layers`
            own = plan.for_stage(stage) if plan.stage_tp else plan  # its group's TP degree (stage_degrees)
            job = Job.build(variant, view, own, engine)  # uniform: a mixed plan takes no other per-stage field
            prepared = prepare(variant, view, job.columns, job.framework)  # costs, memory and hand-off share it
            costs = pipeline_costs(job, prepared)
            memory = stage_memory(variant, view.accelerator, prepared.cols, prepared.inner, stage, job.framework)
            per_stage.append((costs, stage))
            members.append((share, layers, float(memory["total"]), view.accelerator))
            if plan.stage_tp:
                hops.append((view, StageView(model=variant, prepared=prepared, layers=layers)))
            stage += 1
    c = _mixed_costs([(costs, s) for costs, s in per_stage])
    if hops:  # groups of their own TP degree: each boundary as plait.cost.per_stage costs it, on both sides' views
        c = replace(c, p2p_s=max(boundary_p2p_s(view, [a, b]) for (va, a), (vb, b) in zip(hops, hops[1:])
                                 for view in (va, vb)))
    timeline = simulate_pipeline(c, record=False)
    step = timeline.step_time_s
    busy = [c.m * (c.forward_s[r] + c.backward_s[r]) + c.optimizer_s[r] for r in range(c.p)]
    groups = tuple(GroupTime(group=share.group, accelerator=acc.name, num_gpus=share.num_gpus // len(share.layers),
                             work=f"{layers} layers", busy_s=busy[r], idle_s=step - busy[r], memory_bytes=mem,
                             capacity_bytes=acc.memory_bytes, precision=acc.arithmetic(plan.precision))
                   for r, (share, layers, mem, acc) in enumerate(members))
    slow = max(range(c.p), key=lambda r: busy[r])
    compute = c.m * (c.forward_s[slow] + c.backward_s[slow])
    end = max(timeline.pipeline_end_s)
    time = TimeBreakdown(compute_s=compute, pp_bubble_s=max(end - compute, 0.0), dp_comm_s=max(step - end, 0.0))
    uniform = plan.uniform()  # at the first group's TP degree
    # the whole model on the first group: its stages were checked one by one above
    reference = predict(Job.checked(model, views[0], uniform, engine), simulate=False)
    peak = sum(acc.peak_flops(plan.precision) * share.num_gpus // len(share.layers)
               for share, _, _, acc in members)
    return MixedEstimate(
        model_name=model.name, cluster_name=cluster.name, plan=mixed, step_time_s=step,
        tokens_per_step=plan.global_batch * plan.seq_len, groups=groups, time=time,
        model_flops_per_token=reference.model_flops_per_step / reference.tokens_per_step, peak_flops=peak,
        price_per_hour_usd=mixed_price(cluster, mixed), steps_multiplier=reference.steps_multiplier,
        steps_multiplier_known=reference.convergence.known)


def _mixed_costs(stages: list[tuple[PipelineCosts, int]]) -> PipelineCosts:
    """One pipeline whose rank ``r`` takes rank ``r``'s durations from the costs of its own stage."""
    first = stages[0][0]

    def pick(name: str) -> list:
        return [getattr(costs, name)[r] for costs, r in stages]

    return replace(first, forward_s=pick("forward_s"), backward_s=pick("backward_s"),
                   weight_grad_s=pick("weight_grad_s"), grad_reduce_s=pick("grad_reduce_s"),
                   param_gather_s=pick("param_gather_s"), buckets=pick("buckets"), optimizer_s=pick("optimizer_s"),
                   p2p_s=max(costs.p2p_s for costs, _ in stages))
