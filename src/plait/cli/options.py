"""Building a Plan and a Job from command-line options (shared by commands that take a plan)."""

from __future__ import annotations

from pathlib import Path

from plait.engine.catalog import DEFAULT_ENGINE, get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import DEFAULT_CLUSTER, resolve_cluster
from plait.job import Job
from plait.plan.defaults import GPUS, plan_from_options
from plait.plan.io import read_plan_file
from plait.plan.plan import Plan
from plait.workload.catalog import resolve_model

__all__ = ["DEFAULT_CLUSTER", "DEFAULT_GPUS", "DEFAULT_MODEL", "ENGINE_HELP", "plan_from_options", "resolve_job"]

DEFAULT_MODEL = "llama3-8b"
DEFAULT_GPUS = GPUS
ENGINE_HELP = (f"Engine that runs the plan: name[@version][[key=value]] (see `plait engines`). [default: the plan "
               f"file's, else {DEFAULT_ENGINE}]")


def resolve_job(model: str | None, cluster: str | None, plan_file: Path | None, plan: Plan | None,
                engine: str | None = None) -> Job:
    """The job from the options, or from ``plan_file`` (model/cluster/engine options take precedence), built and
    checked once (:meth:`plait.job.Job.build`; against the GPU count the plan file states, if it does)."""
    gpus = None
    if plan_file is not None or plan is None:
        if plan_file is None:
            raise ConfigError("give layout options or --plan FILE")
        spec, plan = read_plan_file(plan_file)
        model = model or spec.model or None
        cluster = cluster or spec.cluster or None
        engine = engine or spec.engine or None
        gpus = spec.gpus or None
    return Job.build(resolve_model(model or DEFAULT_MODEL), resolve_cluster(cluster or DEFAULT_CLUSTER), plan,
                     get_engine(engine or DEFAULT_ENGINE), num_gpus=gpus)
