"""The transformer kind's ``plait estimate``: its job from the layout options or a plan file, built and checked once,
priced by the one estimate assembly."""

from __future__ import annotations

from pathlib import Path

from plait.cost.estimate import Estimate
from plait.engine.backends import with_backend
from plait.engine.catalog import DEFAULT_ENGINE, get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import DEFAULT_CLUSTER, resolve_cluster
from plait.job import Job
from plait.plan.defaults import layout_plan
from plait.plan.plan import Plan
from plait.predict.estimate import predict
from plait.workload.catalog import DEFAULT_MODEL, resolve_model
from plait.workloads import Options, Workload


def resolve_job(model: str | None, cluster: str | None, plan_file: Path | None, plan: Plan | None,
                engine: str | None = None, backend: str | None = None) -> Job:
    """The job from the options, or from ``plan_file`` (model/cluster/engine options take precedence), built and
    checked once (:meth:`plait.job.Job.build`; against the GPU count the plan file states, if it does); its cluster
    seen through ``backend``, else the engine's collective back-end (:func:`plait.engine.backends.with_backend`)."""
    gpus = None
    if plan_file is not None or plan is None:
        if plan_file is None:
            raise ConfigError("give layout options or --plan FILE")
        from plait.plan.io import read_plan_file  # with its mixed-plan reader: a plan file only

        spec, plan = read_plan_file(plan_file)
        model = model or spec.model or None
        cluster = cluster or spec.cluster or None
        engine = engine or spec.engine or None
        gpus = spec.gpus or None
    built = get_engine(engine or DEFAULT_ENGINE)
    where = with_backend(resolve_cluster(cluster or DEFAULT_CLUSTER), backend or built.framework.collective_backend)
    return Job.build(resolve_model(model or DEFAULT_MODEL), where, plan, built, num_gpus=gpus)


def job(workload: Workload, options: Options) -> Job:
    """The job of the layout options (one sequence per micro-batch unless asked otherwise) or of the plan file."""
    plan = layout_plan(options) if options["plan_file"] is None else None
    return resolve_job(workload.source, options["cluster"], options["plan_file"], plan, options["engine"],
                       options.get("backend"))


def price(workload: Workload, options: Options) -> Estimate:
    """``plait estimate``: :func:`job` priced by the one estimate assembly (:func:`plait.predict.estimate.predict`)."""
    return predict(job(workload, options), simulate=options["simulate"])
