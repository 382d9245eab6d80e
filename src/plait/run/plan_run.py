"""``plait run --plan``: check a plan before any process starts, launch its ranks (plait's runtime or torchtitan) or
say the multi-node torchrun line, and return the measured steps beside plait's prediction."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from plait.cost.estimate import Estimate
from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import resolve_cluster
from plait.hardware.cluster import Cluster
from plait.job import Job
from plait.plan.io import JobSpec, read_plan_parts
from plait.plan.mixed import MixedPlan, per_stage_plan, replica_micro_batches
from plait.plan.plan import Plan
from plait.predict.estimate import predict
from plait.predict.mixed_result import MixedEstimate
from plait.run.async_plan import MODULE as ASYNC_MODULE
from plait.run.async_plan import async_config, check_async, launch_line, run_async_plan
from plait.run.config import write_config
from plait.run.launch import local_slots, multinode_command, run_local
from plait.run.mixed_run import MixedRun, resolve_mixed_run
from plait.run.precision import cpu_fallback_note
from plait.run.preflight import check_checkpointing, check_machine
from plait.run.torchtitan import launch_torchtitan
from plait.run.uneven import Uneven, check_rounds, check_uneven, layer_counts
from plait.run.uneven_prediction import predict_uneven
from plait.run.worker_config import WorkerConfig
from plait.workload.catalog import resolve_model
from plait.workload.model import ModelSpec


@dataclass(frozen=True, kw_only=True)
class PlanRun:
    """A ``plait run --plan`` request: what every rank reads, and how the ranks are started."""

    config: WorkerConfig
    """Each rank's configuration (``metrics`` the user's file, or ``None`` for one in a temporary folder)."""
    engine: str = "plait"
    """plait (plait's own runtime) or torchtitan."""
    nodes: int = 1
    """Nodes; more than one says the torchrun line to run on each instead of starting ranks."""
    max_restarts: int = 0
    """Restarts of every rank after a failure (torchrun's elastic agent), from the newest valid checkpoint."""
    out: Path | None = None
    """torchtitan: folder for its assets and outputs (``None``: a temporary folder)."""

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ConfigError(f"--nodes={self.nodes} must be >= 1")


@dataclass(frozen=True, kw_only=True)
class RunReport:
    """A finished run's measured steps beside plait's prediction for the same plan."""

    model: ModelSpec
    """The plan's model."""
    plan: Plan
    """The plan the ranks ran."""
    hardware: Cluster
    """The cluster the prediction is for."""
    predicted: Estimate
    """plait's estimate of the even plan."""
    mixed: MixedEstimate | None
    """The uneven run's step-time estimate (each rank a device group of one); ``None`` for an even run or a layout
    :func:`plait.run.uneven_prediction.mixed_plan` cannot express."""
    uneven: bool
    """Whether the run was uneven (``--slowdown``, ``--batch-split``, ``--stage-layers``)."""
    on_gpu: bool
    """Whether the ranks ran on this node's GPUs (else on its CPU cores)."""
    rows: tuple[dict[str, Any], ...]
    """The metrics file's rows, one per step (:class:`plait.run.train.StepMetrics`)."""
    planned: MixedEstimate | None = None
    """A mixed plan file's prediction on the devices it names (not this machine's); ``None`` for other plans."""
    full_precision: bool = False
    """Whether the ranks trained in fp32 whatever the plan's precision (``--full-precision`` or the CPU fallback)."""

    @property
    def predicted_chunked_bytes(self) -> float | None:
        """The cost model's bytes of the reporting rank's chunked collectives per step (``overlap_chunks`` > 1; else
        ``None``): the layers of the last pipeline rank's stages, at the precision the ranks trained in."""
        plan, model = self.plan, self.model
        if plan.overlap_chunks == 1:
            return None
        from plait.cost.chunked import chunked_step_bytes
        from plait.cost.setup import Setup

        counts = layer_counts(model.num_layers, plan.pp * plan.vpp)
        layers = []
        for stage in range(plan.pp - 1, plan.pp * plan.vpp, plan.pp):  # the reporting rank's stages
            first = sum(counts[:stage])
            for i in range(counts[stage]):  # full recomputation: the first recompute_layers of a stage (-1: all)
                again = plan.recompute == "full" and (plan.recompute_layers < 0 or i < plan.recompute_layers)
                layers.append((model.is_moe_layer(first + i), again))
        ran = replace(plan, precision="fp32") if self.full_precision else plan
        setup = Setup(model=model, cluster=self.hardware, plan=ran, framework=get_engine("plait").framework)
        return chunked_step_bytes(setup, layers)

    @property
    def predicted_step_s(self) -> float:
        """The predicted step of the rank that reports (data-parallel rank 0): the even plan's, or the uneven
        run's; with per-rank local steps, its round over its own local steps (it logs each of them)."""
        if self.mixed is None:
            return self.predicted.step_time_s
        return self.mixed.step_time_s / self.mixed.plan.shares[0].local_steps


@dataclass(frozen=True, kw_only=True)
class RunOutcome:
    """What ``plait run --plan`` ended with."""

    exit_code: int
    """torchrun's or torchtitan's exit code; 0 for a dry run and for a multi-node line said."""
    report: RunReport | None = None
    """The measured run beside its prediction, where ranks trained and wrote at least one step."""


Say = Callable[[str], None]
"""Where a run's notes and commands go (the CLI's console)."""


def run_plan(request: PlanRun, say: Say) -> RunOutcome:
    """Check ``request`` before any process starts (the plan's rules, the runtime's, checkpointing, this machine),
    then start its ranks here, or torchtitan, or say the multi-node line; a user mistake is a ConfigError."""
    config = request.config
    job, the_plan, mixed = read_plan_parts(config.plan)
    model = resolve_model(job.model)
    the_plan = the_plan.with_seq_len(model.seq_len)  # filled once: every check below and the launchers read it
    if request.engine not in ("plait", "torchtitan"):
        raise ConfigError(f"engine={request.engine!r} must be plait or torchtitan (the engines plait run can launch)")
    mixed_run = None
    if mixed is not None:
        mixed_run, config = _mixed(config, request, job, replace(mixed, plan=the_plan), model)
        the_plan = per_stage_plan(replace(mixed, plan=the_plan))  # groups at their own TP degree: layers in the plan
    check_uneven(config.uneven, the_plan, model.num_layers, replica_micro_batches(mixed))
    check_rounds(config.steps, the_plan, config.uneven, checkpointing=config.checkpoint_dir is not None)
    if request.engine == "torchtitan":
        if request.nodes != 1:
            raise ConfigError(f"--nodes={request.nodes}: plait run launches torchtitan on this node only")
        return RunOutcome(exit_code=launch_torchtitan(job.model, model, the_plan, config.steps, request.out,
                                                      config.dry_run, say))
    _check_options(request, model, the_plan)
    if the_plan.dp_sync.server_ranks:
        check_async(config, the_plan, request.nodes)
    config = _precision(config, the_plan.precision, request.nodes, say)
    gpus = the_plan.num_gpus
    if request.nodes > 1:
        if gpus % request.nodes:  # also a --nodes beyond the plan's GPUs
            raise ConfigError(f"--nodes={request.nodes} must divide the plan's gpus={gpus} (each node runs the same "
                              "number of ranks)")
        # the line leaves --metrics out: the file it names is on this node
        say(multinode_command(replace(config, metrics=None), request.nodes, gpus // request.nodes))
        return RunOutcome(exit_code=0)
    if config.cluster or mixed_run is None:
        hardware = resolve_cluster(config.cluster or job.cluster or "dgx-h100-ib")
    else:  # the ranks at this machine's speed stand for the fastest group, the others slowed from it
        hardware = mixed_run.cluster.group(min(mixed_run.factors, key=mixed_run.factors.__getitem__)).cluster
    predicted, uneven_estimate = _predict(config, model, the_plan, hardware, mixed_run and mixed_run.mixed)
    if mixed_run is not None:
        say(mixed_run.note())
    for note in machine_notes(the_plan, on_gpu=local_slots() is not None):
        say(note)
    if config.metrics is not None and config.metrics.exists() and not config.dry_run:
        say(f"plait: appending this run's steps to {config.metrics} (it holds earlier rows)")
    if the_plan.dp_sync.server_ranks:  # workers and server ranks through the asynchronous runtime
        say(f"plait: {gpus} workers and {the_plan.dp_sync.server_ranks} server rank(s) ({ASYNC_MODULE})")
        if config.dry_run:
            say(launch_line(async_config(config, job.model, the_plan, Path("run.json")), the_plan))
            return RunOutcome(exit_code=0)
        code, rows = run_async_plan(config, job.model, the_plan, predicted.tokens_per_step)
    else:
        code, rows = _launch(config, gpus, request.max_restarts)
    if code != 0 or config.dry_run or not rows:
        return RunOutcome(exit_code=code)
    report = RunReport(model=model, plan=the_plan, hardware=hardware, predicted=predicted, mixed=uneven_estimate,
                       uneven=config.uneven != Uneven(), on_gpu=local_slots() is not None,
                       rows=rows, planned=mixed_run.estimate if mixed_run else None,
                       full_precision=config.full_precision)
    return RunOutcome(exit_code=0, report=report)


def _mixed(config: WorkerConfig, request: PlanRun, job: JobSpec, mixed: MixedPlan,
           model: ModelSpec) -> tuple[MixedRun, WorkerConfig]:
    """A mixed plan file: its run (:mod:`plait.run.mixed_run`) and the ranks' options that carry its shares."""
    given = [flag for flag, on in (("--slowdown", config.slowdown), ("--batch-split", config.batch_split),
                                   ("--stage-layers", config.stage_layers), ("--local-steps", config.local_steps))
             if on]
    if given:
        raise ConfigError(f"{given[0]}: {config.plan} is a mixed plan, whose shares set the uneven options")
    if request.engine != "plait" or request.nodes != 1:
        raise ConfigError(f"{config.plan}: a mixed plan runs on plait's runtime on this node (its groups emulated by "
                          "slowed ranks); leave --engine and --nodes out")
    run = resolve_mixed_run(job, mixed, model, get_engine("plait"))
    u = run.uneven
    return run, replace(config, slowdown=u.slowdown, batch_split=u.batch_split, stage_layers=u.stage_layers,
                        local_steps=u.local_steps)


def _check_options(request: PlanRun, model: ModelSpec, plan: Plan) -> None:
    """The options' checks, in the order ``plait run`` reports them."""
    config = request.config
    metrics = config.metrics
    if metrics is not None and (metrics.is_dir() or not metrics.parent.is_dir()):
        raise ConfigError(f"--metrics {str(metrics)!r} must be a file in an existing folder (each step appends one "
                          "JSON line to it)")
    check_checkpointing(config.checkpoint_dir, config.checkpoint_at, config.checkpoint_every, config.keep,
                        config.resume, config.reshard, config.steps, model, plan)
    max_restarts = request.max_restarts
    if max_restarts < 0 or (max_restarts and not (config.checkpoint_dir and config.checkpoint_every)):
        raise ConfigError(f"--max-restarts={max_restarts} must be >= 0, and a restart resumes from the newest "
                          "checkpoint: pass --checkpoint-dir and --checkpoint-every with it")
    if config.on_nonfinite not in ("stop", "skip"):
        raise ConfigError(f"--on-nonfinite={config.on_nonfinite!r} must be stop or skip")


def machine_notes(plan: Plan, *, on_gpu: bool) -> list[str]:
    """One line each for what ``plan`` does not do on this machine: offload moves nothing on CPU ranks, whose
    parameters and optimizer state already live in host memory; in-network aggregation is emulated on
    point-to-point sends (:mod:`plait.run.servers`), on any device."""
    notes = []
    if not on_gpu and (plan.offload_optimizer or plan.offload_params):
        moved = " and ".join(n for n, on in (("parameters", plan.offload_params),
                                               ("optimizer state", plan.offload_optimizer)) if on)
        notes.append(f"plait: note: offloading the {moved} moves nothing between host and device on CPU ranks (their "
                     "memory is the host's); the run checks the offload path's numerics, not its transfers")
    if plan.dp_sync.server_ranks and on_gpu:
        notes.append(f"plait: note: dp_sync={plan.dp_sync.spec} trains its workers and server ranks on CPU ranks "
                     "(plait.run.async_train, gloo point-to-point), not on this node's GPUs")
    if plan.dp_sync.in_network:
        notes.append(f"plait: note: dp_sync={plan.dp_sync.spec} is emulated: group rank 0 sums as the switch, each "
                     "rank sending the cost model's bytes; no switch hardware aggregates")
    return notes


def _precision(config: WorkerConfig, precision: str, nodes: int, say: Say) -> WorkerConfig:
    """On a single CPU node whose cores emulate the plan's precision, say so and train in fp32."""
    if config.full_precision or nodes != 1 or local_slots() is not None:
        return config

    note = cpu_fallback_note(precision)
    if not note:
        return config
    say(f"plait: {note}")
    return replace(config, full_precision=True)


def _predict(config: WorkerConfig, model: ModelSpec, plan: Plan, hardware: Cluster,
             groups: MixedPlan | None = None) -> tuple[Estimate, MixedEstimate | None]:
    """The plan's rules, then the runtime's, this node's room, and plait's estimate (even, and uneven per rank;
    ``groups``: a mixed plan file's shares, whose groups may run their own micro-batch and recomputation)."""
    from plait.run.support import check_runnable

    slots = local_slots()
    # off CUDA, plait's runtime runs its own point-to-point ring (plait.run.context.uses_pytorch)
    own_ring = plan.cp > 1 and plan.cp_attention == "ring" and slots is None
    engine = get_engine("plait[cp_exchange=ring]" if own_ring else "plait")
    job = Job.build(model, hardware, plan, engine)  # the plan's own rules, then the runtime's
    check_runnable(job.plan, model, on_gpu=slots is not None)
    if slots is not None and plan.num_gpus > slots:
        raise ConfigError(f"the plan needs {plan.num_gpus} GPUs but this node has {slots}; pass --nodes to get the "
                          "torchrun command")
    predicted = predict(job)
    mixed = None
    if config.uneven != Uneven() or (groups and any(s.varies for s in groups.shares)):  # a group of one per rank
        mixed = predict_uneven(model, hardware, plan, config.uneven, groups)
    check_machine(plan.num_gpus, slots, predicted)
    return predicted, mixed


def _launch(config: WorkerConfig, gpus: int, max_restarts: int) -> tuple[int, tuple[dict[str, Any], ...]]:
    """The ranks on this node, each reading ``config`` from a file; the run's exit code and the metrics rows it
    appended. Its log goes to the run's folder: the checkpoint folder, else the metrics file's, else this one."""
    log_folder = config.checkpoint_dir or (config.metrics.parent if config.metrics else Path.cwd())
    with tempfile.TemporaryDirectory() as tmp:
        config = replace(config, metrics=config.metrics or Path(tmp) / "metrics.jsonl")
        assert config.metrics is not None
        earlier = config.metrics.stat().st_size if config.metrics.exists() else 0
        code = run_local(write_config(config, Path(tmp) / "run.json"), gpus, max_restarts, log_folder)
        if code != 0 or config.dry_run:
            return code, ()
        with config.metrics.open("rb") as rows:
            rows.seek(earlier)
            return 0, tuple(json.loads(line) for line in rows.read().decode().splitlines())

