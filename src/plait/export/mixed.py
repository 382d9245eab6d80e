"""The export of a mixed plan: a plan file with its ``[mixed]`` shares (:mod:`plait.plan.io`), which ``plait run``
executes on plait's runtime (:mod:`plait.run.mixed_run`); no other engine runs a plan over device groups."""

from __future__ import annotations

from pathlib import Path

from plait.export.artifact import Artifact
from plait.plan.io import JobSpec, job_path_for, plan_to_toml
from plait.plan.mixed import MixedPlan


def mixed_artifacts(mixed: MixedPlan, model_name: str, cluster_name: str, folder: Path) -> list[Artifact]:
    """plan.toml for ``mixed``, whose model and cluster the command line named ``model_name`` and ``cluster_name``
    (file paths written relative to ``folder``); ``gpus`` says how many of the cluster's devices it takes."""
    spec = JobSpec(model=job_path_for(model_name, folder), cluster=job_path_for(cluster_name, folder),
                   gpus=mixed.num_gpus, engine="plait")
    return [Artifact("plan.toml", plan_to_toml(mixed.plan, spec, mixed))]
