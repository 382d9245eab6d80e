"""Every export of one plan: plait's plan file and the three engine configurations."""

from __future__ import annotations

from plait.export.artifact import Artifact
from plait.export.deepspeed import deepspeed_artifact
from plait.export.megatron import megatron_artifact
from plait.export.torchtitan import CONFIGS, torchtitan_artifact
from plait.plan.io import Job, plan_to_toml
from plait.plan.plan import Plan
from plait.workload.model import ModelSpec


def export_all(plan: Plan, model_name: str, model: ModelSpec, cluster_name: str) -> list[Artifact]:
    """plan.toml, torchtitan.sh (for models torchtitan ships), megatron.sh and deepspeed.json."""
    artifacts = [Artifact("plan.toml", plan_to_toml(plan, Job(model=model_name, cluster=cluster_name,
                                                             gpus=plan.num_gpus)))]
    if model_name in CONFIGS:
        artifacts.append(torchtitan_artifact(plan, model_name, model))
    artifacts += [megatron_artifact(plan, model), deepspeed_artifact(plan)]
    return artifacts
