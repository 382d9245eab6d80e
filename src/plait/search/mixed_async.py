"""Asynchronous candidates for the mixed planner: on devices of unequal speed a synchronous step waits for its
slowest replica, while asynchronous workers each run at their own pace (Dutta et al., AISTATS 2018, "Slow and
Stale Gradients Can Win the Race": asynchrony trades staleness for the stragglers' wait). Each candidate keeps the
even split's local batch on whole replicas (the server ranks exchange whole replicas: tp = pp = cp = 1, sharding none)
and is ranked by all-reduce-equivalent throughput with its steps multiplier at the replica count
(:mod:`plait.plan.async_convergence`), as the local-SGD candidates are.

- ``async_ps:staleness=MAX``: the bound never holds a fast worker (a finite bound ``B`` lets the fastest run only
  ``B`` iterations ahead, so over a long run every worker would step at the slowest's rate, Ho et al. 2013);
  servers 1, 2, 4, ... and one per replica, as many as each keeps the servers from being the bottleneck;
- ``easgd:alpha=0.9/p,every=4``: the elastic rate of plait's measured EASGD figure (Zhang et al. 2015, Sec. 5).
"""

from __future__ import annotations

from dataclasses import replace

from plait.engine.engine import Engine
from plait.hardware.mixed import MixedCluster
from plait.predict.mixed_result import MixedEstimate
from plait.search.mixed_split import try_mixed
from plait.sync import EASGD, AsyncPS, SyncMethod
from plait.sync.asynchronous import LARGEST_BOUND
from plait.workload.model import ModelSpec

EASGD_BETA, EASGD_EVERY = 0.9, 4
"""EASGD's elastic rate per round and period, as in plait's measured figure (``data/convergence.toml``)."""


def methods(replicas: int) -> list[SyncMethod]:
    """The asynchronous methods tried over ``replicas`` workers."""
    servers = sorted({1 << i for i in range(replicas.bit_length())} | {replicas})
    return [*(AsyncPS(staleness=LARGEST_BOUND, servers=s) for s in servers),
            EASGD(alpha=EASGD_BETA / replicas, every=EASGD_EVERY)]


def async_plans(model: ModelSpec, cluster: MixedCluster, even: MixedEstimate, engine: Engine) -> list[MixedEstimate]:
    """Asynchronous variants of the even split ``even`` on whole replicas (none where the layout splits a replica
    over tp, pp or cp ranks); only those whose steps multiplier is known."""
    plan = even.plan.plan
    if plan.tp > 1 or plan.pp > 1 or plan.cp > 1:
        return []
    whole = replace(plan, dp_replicate=plan.dp, dp_shard=1, sharding="none")
    out = []
    for method in methods(whole.dp):
        est = try_mixed(model, cluster, replace(even.plan, plan=replace(whole, dp_sync=method)), engine)
        if est is not None and est.steps_multiplier_known:
            out.append(est)
    return out
