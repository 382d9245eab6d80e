"""Building a Plan and a Job from command-line options (shared by commands that take a plan)."""

from __future__ import annotations

from pathlib import Path

from plait.engine.catalog import DEFAULT_ENGINE, get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import resolve_cluster
from plait.plan.io import read_plan_file
from plait.plan.plan import Plan
from plait.predict.job import Job
from plait.workload.catalog import resolve_model

DEFAULT_MODEL = "llama3-8b"
DEFAULT_CLUSTER = "dgx-h100-ib"
DEFAULT_GPUS = 8
ENGINE_HELP = (f"Engine that runs the plan: name[@version][[key=value]] (see `plait engines`). [default: the plan "
               f"file's, else {DEFAULT_ENGINE}]")


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


def resolve_job(model: str | None, cluster: str | None, plan_file: Path | None, plan: Plan | None,
                engine: str | None = None) -> tuple[Job, int | None]:
    """The job from the options, or from ``plan_file`` (model/cluster/engine options take precedence), and the GPU
    count the plan file states (``None``: not stated)."""
    gpus = None
    if plan_file is not None or plan is None:
        if plan_file is None:
            raise ConfigError("give layout options or --plan FILE")
        spec, plan = read_plan_file(plan_file)
        model = model or spec.model or None
        cluster = cluster or spec.cluster or None
        engine = engine or spec.engine or None
        gpus = spec.gpus or None
    job = Job(model=resolve_model(model or DEFAULT_MODEL), cluster=resolve_cluster(cluster or DEFAULT_CLUSTER),
              plan=plan, engine=get_engine(engine or DEFAULT_ENGINE))
    return job, gpus
