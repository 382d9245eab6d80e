"""The exports of one plan for the engine that will run it: plait's plan file plus the engine's own configuration
(torchtitan arguments, Megatron-LM arguments or a DeepSpeed config; plait's runtime and engines without an
exporter run the plan file). A plan the engine cannot run is refused with the option named."""

from __future__ import annotations

from pathlib import Path

from plait.engine.capability import first_unsupported
from plait.engine.engine import Engine
from plait.errors import ConfigError
from plait.export.artifact import Artifact
from plait.export.deepspeed import deepspeed_artifact
from plait.export.megatron import megatron_artifact
from plait.export.torchtitan import CONFIGS, torchtitan_artifact
from plait.job import Job
from plait.plan.io import JobSpec, job_path_for, plan_to_toml

FILES = {"torchtitan": "torchtitan.sh", "megatron": "megatron.sh", "deepspeed": "deepspeed.json", "plan": None}


def export_names(engine: Engine, model_name: str) -> list[str]:
    """The files :func:`export_for` writes for ``engine``; refuses at once a model the engine has no config for."""
    if engine.export == "torchtitan" and model_name not in CONFIGS:
        raise ConfigError(f"torchtitan 0.3.0 has no config for model {model_name!r} (known: {', '.join(sorted(CONFIGS))})")
    own = FILES[engine.export]
    return ["plan.toml", *([own] if own else [])]


def export_for(job: Job, model_name: str, cluster_name: str, folder: Path | None = None) -> list[Artifact]:
    """plan.toml (naming the engine) and the engine's configuration for ``job``, whose model and cluster the plan
    file names ``model_name`` and ``cluster_name``, to be written into ``folder`` (the plan file's model and cluster
    paths are relative to it; ``None``: as given)."""
    engine, plan = job.engine, job.plan
    refusal = first_unsupported(plan, job.model, engine, cols=job.columns)
    if refusal:
        raise ConfigError(f"cannot export: {refusal}")
    if plan.per_stage and engine.export != "plan":  # no engine configuration states a recomputation mode per stage
        raise ConfigError("cannot export: stage_recompute, stage_layers, stage_sharding and stage_tp to "
                          f"{engine.name}'s configuration (plait run runs the plan file)")
    model_at, cluster_at = ((job_path_for(model_name, folder), job_path_for(cluster_name, folder))
                            if folder is not None else (model_name, cluster_name))
    spec = JobSpec(model=model_at, cluster=cluster_at, gpus=plan.num_gpus, engine=engine.spec)
    artifacts = [Artifact("plan.toml", plan_to_toml(plan, spec))]
    if engine.export == "torchtitan":
        artifacts.append(torchtitan_artifact(job, model_name))
    elif engine.export == "megatron":
        artifacts.append(megatron_artifact(job))
    elif engine.export == "deepspeed":
        artifacts.append(deepspeed_artifact(plan))
    return artifacts
