"""Building a Plan and a Job from command-line options (shared by commands that take a plan)."""

from __future__ import annotations

from pathlib import Path

from plait.errors import ConfigError
from plait.hardware.catalog import resolve_cluster
from plait.hardware.cluster import Cluster
from plait.plan.io import read_plan_file
from plait.plan.plan import Plan
from plait.workload.catalog import resolve_model
from plait.workload.model import ModelSpec

DEFAULT_MODEL = "llama3-8b"
DEFAULT_CLUSTER = "dgx-h100-ib"
DEFAULT_GPUS = 8


def plan_from_options(*, gpus: int, tp: int, pp: int, vpp: int, schedule: str, cp: int, ep: int,
                      dp_replicate: int, sharding: str, sp: bool, recompute: str, recompute_layers: int,
                      micro_batch: int, global_batch: int, seq_len: int, precision: str,
                      offload_optimizer: bool, offload_params: bool) -> Plan:
    """A Plan whose data-parallel degree fills the GPUs left by tp*pp*cp."""
    for name, value in (("gpus", gpus), ("tp", tp), ("pp", pp), ("cp", cp), ("vpp", vpp), ("dp_replicate", dp_replicate)):
        if value <= 0:
            raise ConfigError(f"{name}={value} must be > 0")
    model_parallel = tp * pp * cp
    if gpus % model_parallel:
        raise ConfigError(f"gpus={gpus} must be divisible by tp*pp*cp={tp}*{pp}*{cp}={model_parallel}")
    dp = gpus // model_parallel
    if dp % dp_replicate:
        raise ConfigError(f"dp_replicate={dp_replicate} must divide dp={dp}")
    shard = dp // dp_replicate if sharding != "none" else 1
    if sharding == "none" and dp_replicate not in (1, dp):
        raise ConfigError(f"dp_replicate={dp_replicate} needs a sharding stage (sharding='none' replicates all dp={dp})")
    if schedule == "interleaved" and vpp == 1:
        vpp = 2
    return Plan(
        tp=tp, sp=sp, pp=pp, schedule=schedule, vpp=vpp, cp=cp, ep=ep,  # type: ignore[arg-type]
        dp_replicate=dp // shard, dp_shard=shard, sharding=sharding,  # type: ignore[arg-type]
        recompute=recompute, recompute_layers=recompute_layers,  # type: ignore[arg-type]
        micro_batch=micro_batch, global_batch=global_batch, seq_len=seq_len, precision=precision,  # type: ignore[arg-type]
        offload_optimizer=offload_optimizer, offload_params=offload_params,
    )


def resolve_job(model: str | None, cluster: str | None, plan_file: Path | None,
                plan: Plan | None) -> tuple[ModelSpec, Cluster, Plan, int | None]:
    """Model, cluster and plan from the options, or from ``plan_file`` (model/cluster options take precedence)."""
    gpus = None
    if plan_file is not None or plan is None:
        if plan_file is None:
            raise ConfigError("give layout options or --plan FILE")
        job, plan = read_plan_file(plan_file)
        model = model or job.model or None
        cluster = cluster or job.cluster or None
        gpus = job.gpus or None
    model_spec = resolve_model(model or DEFAULT_MODEL)
    cluster_spec = resolve_cluster(cluster or DEFAULT_CLUSTER)
    return model_spec, cluster_spec, plan, gpus
