"""A job: model + cluster + plan + engine, the one typed thing predict, plan, simulate, export and run receive.

A Job is built and validated once (:meth:`Job.build`): the plan's sequence length is resolved from the model
and the plan rules (:func:`plait.plan.rules.check_plan`) are checked there, so nothing downstream re-fills the
sequence length or re-checks the plan. The engine's cost facts are :attr:`Job.framework`: never a default.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from plait.engine.engine import Engine
from plait.engine.facts import EngineFacts
from plait.hardware.cluster import Cluster
from plait.kept import MISSING, Kept
from plait.plan.columns import PlanColumns
from plait.plan.plan import Plan
from plait.plan.rules import check_plan
from plait.workload.model import ModelSpec


@dataclass(frozen=True, kw_only=True)
class Job:
    """One training job; build it with :meth:`build` (or :meth:`checked` for a plan checked as a batch row)."""

    model: ModelSpec
    """What is trained."""
    cluster: Cluster
    """Where."""
    plan: Plan
    """How it is parallelised, its ``seq_len`` filled."""
    engine: Engine
    """The software that runs it."""
    notes: tuple[str, ...] = ()
    """What building the job assumed: the model's sequence length where the plan left it and the model says where it
    comes from, and a 16-bit precision the device does not have taken as the one it has (estimates carry them as
    warnings, with the model's fields not modelled)."""

    def __post_init__(self) -> None:
        assert self.plan.seq_len > 0, "a Job's plan has its sequence length resolved (Job.build)"

    @classmethod
    def build(cls, model: ModelSpec, cluster: Cluster, plan: Plan, engine: Engine, *,
              num_gpus: int | None = None) -> Job:
        """The job, its sequence length filled from ``model`` when the plan leaves it 0, its plan checked against
        the plan rules (and against ``num_gpus``, the GPU count a plan file states): :class:`ConfigError` naming
        the first broken rule."""
        notes = model.seq_len_notes(plan.seq_len)
        plan = plan.with_seq_len(model.seq_len)
        runs_as = cluster.accelerator.arithmetic(plan.precision)
        if runs_as != plan.precision:
            notes += (f"precision {plan.precision} runs as {runs_as} on {cluster.accelerator.name} (its datasheet "
                      f"lists no {plan.precision} arithmetic)",)
            plan = replace(plan, precision=runs_as)
        columns = PlanColumns.one(plan)
        _check_once(plan, model, cluster, num_gpus, columns)  # before the Job: it holds checked plans
        job = cls(model=model, cluster=cluster, plan=plan, engine=engine, notes=notes)
        job.__dict__["columns"] = columns  # the cached property's value, already built for the check
        return job

    @classmethod
    def checked(cls, model: ModelSpec, cluster: Cluster, plan: Plan, engine: Engine) -> Job:
        """A job whose plan, its sequence length filled, already passed the plan rules: a row of a batch that
        :func:`plait.plan.rules.broken_rule_index` filtered, or a mixed plan's stages each checked on their own."""
        return cls(model=model, cluster=cluster, plan=plan, engine=engine)

    @property
    def framework(self) -> EngineFacts:
        """The engine's cost facts."""
        return self.engine.framework

    @cached_property
    def columns(self) -> PlanColumns:
        """The plan as columns of one row (the single-plan path of :mod:`plait.cost.batch`), built once."""
        return PlanColumns.one(self.plan)


_CHECKED: Kept[bool] = Kept(1024)


def _check_once(plan: Plan, model: ModelSpec, cluster: Cluster, num_gpus: int | None, columns: PlanColumns) -> None:
    """:func:`check_plan`, skipped for a plan that passed it with the same model, cluster and GPU count among the
    last 1,024 checked (the rules are a function of these alone; a plan estimated again, as validation,
    reports and the planner's top plans do, is not re-checked). Keyed by the plan's value and the identity of the
    model and cluster, which the entry holds (frozen: the same object is the same value, its id not reused while
    the entry lives); a plan that breaks a rule is not kept, so it raises every time."""
    key = (id(model), id(cluster), num_gpus, plan)
    if _CHECKED.find(key) is not MISSING:
        return
    check_plan(plan, model, cluster, num_gpus=num_gpus, cols=columns)
    _CHECKED.keep(key, (model, cluster), True)
