"""``plait run --plan PLAN.toml`` for a traced module (``[job] model = "module:factory"``, as ``plait plan --model
MODULE:FACTORY --export`` writes it): the plan's data parallelism, ZeRO stage and recomputation trained on this
machine's ranks by :mod:`plait.workloads.traced.worker`, printed beside plait's estimate of the same plan.

What the worker runs (DDP, ZeRO-1, FSDP2's ZeRO-2/3 and HSDP, full recomputation of the repeated units, pipeline
stages cut where the cost model cut them under GPipe or 1F1B, ``dp_sync`` methods over whole replicas, tensor
parallelism of the units' Linear pairs alone, under DDP or in pipeline stages, without stages with each step's TP
and DP bytes printed beside the cost model's) covers the traced planner's plans; a method with server ranks, or one
over pipeline replicas, is refused before a rank starts.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from plait.engine.catalog import get_engine
from plait.errors import ConfigError, require_extra
from plait.hardware.catalog import DEFAULT_CLUSTER, resolve_cluster
from plait.plan.io import read_plan_file
from plait.plan.plan import Plan
from plait.run.launch import local_slots, run_worker
from plait.run.precision import cpu_fallback_note
from plait.run.preflight import check_cpu_machine
from plait.run.workload_configs import TracedConfig
from plait.terminal import rich_console, titled_table
from plait.units import format_bytes
from plait.workloads import Options, Workload
from plait.workloads.traced.cost import check_traced_plan, collective_bytes_per_step
from plait.workloads.traced.predict import predict_traced
from plait.workloads.traced.timing import plan_stages
from plait.workloads.traced.tracing import storage_dtype, trace

WORKER = "plait.workloads.traced.worker"
RUN_DEFAULTS = {"checkpoint_dir": None, "checkpoint_at": 0, "checkpoint_every": 0, "resume": False, "reshard": False,
                "async_save": False, "max_restarts": 0, "trace_dir": None, "nodes": 1, "metrics": None,
                "on_nonfinite": "stop", "slowdown": None, "batch_split": None, "stage_layers": None}
"""``plait run`` options a traced module's run takes only at these values (the transformer runtime's checkpoints,
restarts, traces, metrics file and uneven emulation)."""


def runtime_refusal(plan: Plan) -> str | None:
    """Why the worker cannot run ``plan`` (module docstring), or ``None``."""
    if plan.dp_sync.server_ranks:
        return (f"dp_sync={plan.dp_sync.spec}: its server ranks are started for the transformer runtime only "
                "(plait run --plan of a catalog model)")
    if not plan.dp_sync.is_allreduce and plan.pp > 1:
        return (f"dp_sync={plan.dp_sync.spec} with pp={plan.pp}: plait run synchronizes a traced module's pipeline "
                "replicas with the all-reduce only")
    if plan.offload_optimizer or plan.offload_params:
        return "offloading is not costed for traced workloads; use offload_params = offload_optimizer = false"
    return None


def run_traced_plan(workload: Workload, options: Options) -> None:
    """Train the plan file ``options["plan"]`` (module docstring)."""
    given = [name for name, default in RUN_DEFAULTS.items() if options.get(name, default) != default]
    if given or options.get("engine", "plait") != "plait":
        name = given[0] if given else "engine"
        raise ConfigError(f"--{name.replace('_', '-')}: plait run trains a traced module's plan on plait's runtime "
                          "without checkpoints, restarts, traces, a metrics file or uneven ranks")
    path = Path(options["plan"])
    job, plan = read_plan_file(path)
    require_extra("traced" if job.model.startswith("plait.workload.zoo:") else "run", f"--model {job.model}")
    work = trace(job.model, job.input_shape or None, job.input_dtype or None, storage_dtype(plan.precision))
    check_traced_plan(work, plan)
    refusal = runtime_refusal(plan)
    if refusal:
        raise ConfigError(refusal)
    cluster = resolve_cluster(options.get("cluster") or job.cluster or DEFAULT_CLUSTER)
    predicted = predict_traced(work, cluster, plan, get_engine("plait"))
    ranks = plan.num_gpus
    if local_slots() is not None:
        raise ConfigError("plait run trains a traced module on CPU ranks (gloo) only; this machine has GPUs")
    check_cpu_machine(ranks, predicted.memory.total_bytes)
    console = rich_console()
    note = None if options.get("full_precision") else cpu_fallback_note(plan.precision)
    bf16 = not options.get("full_precision") and plan.precision in ("bf16", "fp16", "fp8") and note is None
    if note:
        console.print(f"plait: {note}")
    config = TracedConfig(factory=job.model, input_shape=work.example_shape, input_dtype=work.input_dtype,  # type: ignore[arg-type]
                          dp_replicate=plan.dp_replicate, dp_shard=plan.dp_shard, sharding=plan.sharding, tp=plan.tp,
                          recompute_units=-1 if plan.recompute == "full" else 0,  # every unit, as the cost model recomputes
                          pp=plan.pp, stage_starts=tuple(group[0] for group in plan_stages(work, cluster, plan)[1:]),
                          schedule="gpipe" if plan.schedule == "gpipe" else "1f1b",
                          micro_batch=plan.micro_batch, global_batch=plan.global_batch,
                          optimizer=plan.optimizer, dp_sync=plan.dp_sync.spec, bf16=bf16, steps=options.get("steps", 10), out=Path("unused"))
    console.print(f"{work.name}: {plan.describe()} on {ranks} CPU ranks (gloo), {config.steps} steps")
    if options.get("dry_run"):
        return
    measured = run_worker(WORKER, ranks, config)
    times = measured["step_times_s"]
    steady = times[1:] or times
    table = titled_table(f"{work.name}: {plan.describe()} on {ranks} ranks")
    for column in ("", "measured", f"predicted ({cluster.name})"):
        table.add_column(column, justify="right")
    table.add_row("step time s (median after step 1)", f"{statistics.median(steady):.4f}",
                  f"{predicted.step_time_s:.4f}")
    table.add_row("peak memory", format_bytes(measured["peak_memory_bytes"]),
                  format_bytes(predicted.memory.total_bytes))
    if plan.tp > 1 and plan.pp == 1:  # what rank 0 handed to its TP and DDP collectives per step, and the model's
        ran = work if bf16 == (work.dtype != "float32") else trace(
            job.model, job.input_shape or None, job.input_dtype or None, "bfloat16" if bf16 else "float32")
        for label, key, bytes_ in zip(("TP all-reduce bytes/step", "DP all-reduce bytes/step"),
                                      ("tp_bytes_per_step", "dp_bytes_per_step"), collective_bytes_per_step(ran, plan)):
            table.add_row(label, f"{statistics.median(measured[key]):,.0f}", f"{bytes_:,.0f}")
    table.add_row("final loss", f"{measured['losses'][-1]:.4f}", "")
    console.print(table)
    if not cluster.source.startswith("measured by plait calibrate"):
        console.print(f"note: predicted for {cluster.name}, not this CPU; `plait calibrate` measures this machine "
                      "for --cluster calibrated.toml")
