"""``plait run`` of a mixed plan file (``plait plan --cluster <mixed> --export DIR``): the plan's shares as the
runtime's uneven options (torch-free).

A :class:`plait.plan.mixed.MixedPlan` becomes one :class:`plait.run.uneven.Uneven`, ranks filling the shares in
order (a share's ranks are consecutive, :mod:`plait.plan.mixed`):
- a data split's batches as each data-parallel rank's sequences per step (``batch_split``, where they differ);
- a pipeline split's layers as each stage's (``stage_layers``); where its groups take their own TP degree
  (``stage_tp``), in the plan instead (:func:`plait.plan.mixed.per_stage_plan`), which :mod:`plait.run.stage_tp`
  trains (``dp = cp = 1``; :func:`plait.run.stage_tp.check_stage_tp` refuses the rest before launch);
- per-group local steps as each data-parallel rank's (``local_steps``; a group without its own takes the plan's
  period, as :func:`plait.predict.mixed.estimate_mixed` costs it);
- each group's devices as ranks slowed to their predicted relative speed (``slowdown``): the ranks of one machine
  emulate the groups, the fastest group at this machine's speed and every other group ``f`` times slower, ``f``
  the ratio of the two devices' predicted compute time for the same work (:func:`device_factors`); a layout whose
  ranks cannot be slowed (tp, cp or ep: collectives inside each block) runs its shares at one speed, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from plait.engine.engine import Engine
from plait.errors import ConfigError
from plait.hardware.mixed import MixedCluster, group_view, sliced
from plait.hardware.mixed_catalog import mixed_cluster
from plait.job import Job
from plait.plan.io import JobSpec
from plait.plan.mixed import MixedPlan, replica_batches, run_refusal
from plait.predict.estimate import predict
from plait.predict.mixed import estimate_mixed
from plait.predict.mixed_result import MixedEstimate
from plait.run.uneven import Uneven, slowdown_refusal
from plait.workload.model import ModelSpec


@dataclass(frozen=True, kw_only=True)
class MixedRun:
    """A mixed plan file, resolved: the devices it takes, its prediction there, and how one machine runs it."""

    cluster: MixedCluster
    """The devices the plan takes (:func:`plait.hardware.mixed.sliced` of the file's cluster to its ``gpus``)."""
    mixed: MixedPlan
    """The plan and its shares (sequence length filled)."""
    estimate: MixedEstimate
    """plait's prediction of the plan on ``cluster``."""
    factors: dict[str, float]
    """Each group's predicted compute time over the fastest group's, for the same work (>= 1)."""
    uneven: Uneven
    """What every rank of the run does unevenly."""
    unslowed: str | None = None
    """Why the groups' ranks run at one speed (:func:`plait.run.uneven.slowdown_refusal`); ``None``: slowed."""

    def note(self) -> str:
        """One line: which ranks emulate which group, and how much slower (or why they are not slowed)."""
        if self.unslowed:
            return (f"plait: running the shares of {self.cluster.name} on this machine's ranks at one speed, not "
                    f"slowed to each group's (--slowdown with {self.unslowed}): the run checks the shares, not the "
                    "groups' speeds")
        at, parts = 0, []
        for share in self.mixed.shares:
            ranks = f"rank {at}" if share.num_gpus == 1 else f"ranks {at}-{at + share.num_gpus - 1}"
            parts.append(f"{ranks} = {share.group} x{self.factors[share.group]:.3g}")
            at += share.num_gpus
        return (f"plait: emulating {self.cluster.name} on this machine's ranks, each group slowed to its device's "
                f"predicted speed relative to the fastest ({', '.join(parts)}; plait.run.slowdown)")


def resolve_mixed_run(job: JobSpec, mixed: MixedPlan, model: ModelSpec, engine: Engine) -> MixedRun:
    """The mixed plan file's run: its cluster (``job.cluster``, ``job.gpus`` of it), its prediction there, the
    groups' speed factors and the uneven options; a plan the runtime cannot run is refused by name."""
    whole = mixed_cluster(job.cluster or None)
    if whole is None:
        raise ConfigError(f"[mixed] shares the plan over device groups, but [job] cluster={job.cluster!r} is not a "
                          "mixed cluster (a mixed preset or a file with [[groups]])")
    cluster = sliced(whole, mixed.plan.num_gpus)
    refusal = run_refusal(mixed)
    if refusal:
        raise ConfigError(f"{mixed.describe()}: {refusal}")
    estimate = estimate_mixed(model, cluster, mixed, engine=engine)
    factors = device_factors(model, cluster, mixed, engine)
    unslowed = slowdown_refusal(mixed.plan) or (f"stage_tp={list(mixed.plan.stage_tp)}: plait's stage-TP loop"
                                                 if mixed.plan.stage_tp else None)
    uneven = uneven_of(estimate.plan, {g: 1.0 for g in factors} if unslowed else factors)
    return MixedRun(cluster=cluster, mixed=mixed, estimate=estimate, factors=factors, uneven=uneven,
                    unslowed=unslowed if max(factors.values()) > 1.0 else None)


def device_factors(model: ModelSpec, cluster: MixedCluster, mixed: MixedPlan, engine: Engine) -> dict[str, float]:
    """Each share's group: the layout's predicted compute on that group's devices (its view of the job,
    :func:`plait.hardware.mixed.group_view`) over the fastest group's. Compute here is what a slowed rank
    stretches (:mod:`plait.run.slowdown`): forward and backward kernels, recomputation, the host's exposed issue
    time and the optimizer step; the network is left out, as the emulation leaves it at this machine's speed."""
    stretched = {}
    for share in mixed.shares:
        view = group_view(cluster, cluster.group(share.group), mixed.num_gpus)
        t = predict(Job.build(model, view, mixed.plan, engine), simulate=False).time
        stretched[share.group] = t.compute_s + t.recompute_s + t.host_s + t.optimizer_s
    fastest = min(stretched.values())
    return {group: seconds / fastest for group, seconds in stretched.items()}


def uneven_of(mixed: MixedPlan, factors: dict[str, float]) -> Uneven:
    """The runtime's options for ``mixed`` (local steps already filled from the plan's period, as
    :func:`plait.predict.mixed.estimate_mixed` returns its plan) with each group's ranks ``factors`` slower."""
    slowdown = tuple(factors[s.group] for s in mixed.shares for _ in range(s.num_gpus))
    slowdown = slowdown if max(slowdown) > 1.0 else ()
    if mixed.split == "pipeline" and mixed.plan.stage_tp:  # the layers go in the plan (per_stage_plan)
        return Uneven(slowdown=slowdown)
    if mixed.split == "pipeline":
        return Uneven(slowdown=slowdown, stage_layers=tuple(n for s in mixed.shares for n in s.layers))
    batches = replica_batches(mixed)
    local = tuple(s.local_steps for s in mixed.shares for _ in range(s.num_gpus // mixed.plan.model_parallel))
    return Uneven(slowdown=slowdown, batch_split=batches if len(set(batches)) > 1 else (),
                  local_steps=local if mixed.plan.dp_sync.group_local_steps and len(set(local)) > 1 else ())

