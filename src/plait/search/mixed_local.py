"""Heterogeneity-aware local SGD candidates for the mixed planner (000-17, "Biased Local SGD for Efficient Deep
Learning on Heterogeneous Systems", arXiv 2508.08540: fast devices run more local steps between averagings, so
nobody waits). Each group keeps the even split's local batch; its local steps scale with its speed so that
every group's round takes about as long as the slowest group's, rounded to the periods whose steps multiplier
plait has measured (``plan/data/convergence.toml``), so the ranking's multiplier is known, not assumed."""

from __future__ import annotations

from dataclasses import replace

from plait.engine.engine import Engine
from plait.hardware.mixed import MixedCluster
from plait.plan.convergence import table
from plait.plan.mixed import MixedPlan
from plait.predict.mixed_result import MixedEstimate
from plait.search.mixed_split import try_mixed
from plait.sync import LocalSGD, parse
from plait.workload.model import ModelSpec


def measured_periods() -> tuple[int, ...]:
    """Local-SGD periods with a steps multiplier in plait's table."""
    methods = [(parse(spec), entries) for spec, entries in table().items()]
    periods = {m.every for m, entries in methods  # local SGD's own entries: equal to local SGD at their period
               if m == LocalSGD(every=m.every) and any(e.figure.known for e in entries)}
    return tuple(sorted(periods))


def local_sgd_plans(model: ModelSpec, cluster: MixedCluster, even: MixedEstimate,
                    engine: Engine) -> list[MixedEstimate]:
    """Local-SGD variants of the even split ``even``: whole replicas (``dp_replicate = dp``), or replicas sharded
    over as many ranks as every group's data-parallel ranks allow (fewest replicas: HSDP, each group one or more
    replicas); for each measured period H of the slowest group, the faster groups take the measured period
    nearest ``H x`` their speed-up (never fewer than H). Only plans whose steps multiplier is known are kept."""
    plan, periods = even.plan.plan, measured_periods()
    ranks = [s.num_gpus // plan.model_parallel for s in even.plan.shares]
    shard = max(k for k in _powers_of_two(min(ranks)) if all(r % k == 0 for r in ranks))
    variants = {replace(plan, dp_replicate=plan.dp, dp_shard=1, sharding="none")}
    if shard > 1:
        sharding = plan.sharding if plan.sharding != "none" else "zero3"
        variants.add(replace(plan, dp_replicate=plan.dp // shard, dp_shard=shard, sharding=sharding))
    out = []
    for variant in sorted(variants, key=lambda p: p.dp_shard):
        base_est = try_mixed(model, cluster, replace(even.plan, plan=variant), engine)
        if base_est is None:
            continue
        slowest = max(g.busy_s for g in base_est.groups)
        for base in periods:
            steps = [max(base, min(periods, key=lambda h, g=g: abs(h - base * slowest / g.busy_s)))
                     for g in base_est.groups]
            local = replace(variant, dp_sync=LocalSGD(every=base))
            shares = tuple(replace(s, local_steps=h) for s, h in zip(even.plan.shares, steps, strict=True))
            est = try_mixed(model, cluster, MixedPlan(plan=local, split="data", shares=shares), engine)
            if est is not None and est.steps_multiplier_known:
                out.append(est)
    return out


def _powers_of_two(limit: int) -> list[int]:
    return [1 << i for i in range(limit.bit_length()) if 1 << i <= limit]
