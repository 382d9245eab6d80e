"""``plait run``: train a plan on torch.distributed and compare with the prediction."""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from plait.cost.memory import optimizer_bytes_per_param
from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import resolve_cluster
from plait.plan.columns import PlanColumns
from plait.plan.io import read_plan_file
from plait.predict.estimate import estimate
from plait.run.launch import local_slots, multinode_command, run_local
from plait.units import GIB
from plait.workload.catalog import resolve_model
from plait.workloads import labels_with, load


def run_command(
    plan: Annotated[Path | None, typer.Option(help="Plan TOML ([job] model and [plan]).")] = None,
    steps: Annotated[int, typer.Option(help="Optimizer steps.")] = 10,
    cluster: Annotated[str | None, typer.Option(help="Hardware description for the prediction "
                                                     "(preset, file, or the output of `plait calibrate`).")] = None,
    metrics: Annotated[Path | None, typer.Option(help="JSON-lines file for per-step metrics.")] = None,
    checkpoint_dir: Annotated[Path | None, typer.Option(help="Distributed checkpoint folder.")] = None,
    checkpoint_at: Annotated[int, typer.Option(help="Save after this many steps (0: never).")] = 0,
    checkpoint_every: Annotated[int, typer.Option(help="Save every this many steps (0: never).")] = 0,
    keep: Annotated[int, typer.Option(help="Newest checkpoints kept in --checkpoint-dir.")] = 2,
    async_save: Annotated[bool, typer.Option(help="Write checkpoints in the background (torch.distributed.checkpoint."
                                                  "async_save); each is published when the next save starts or the "
                                                  "run ends.")] = False,
    resume: Annotated[bool, typer.Option(help="Resume from the newest checkpoint in --checkpoint-dir (verified).")] = False,
    reshard: Annotated[bool, typer.Option(help="Resume a checkpoint saved by another plan into this one.")] = False,
    on_nonfinite: Annotated[str, typer.Option(help="A step with a non-finite gradient norm: stop (exit code 3) or "
                                                   "skip its update.")] = "stop",
    max_restarts: Annotated[int, typer.Option(help="Restart every rank after a failure, up to this many times, "
                                                   "from the newest valid checkpoint (torchrun's elastic agent).")] = 0,
    full_precision: Annotated[bool, typer.Option(help="Train in fp32 (ignore the plan's precision).")] = False,
    dry_run: Annotated[bool, typer.Option(help="Build every mesh, group and stage, validate, do not train.")] = False,
    nodes: Annotated[int, typer.Option(help="Nodes (more than one prints the torchrun command).")] = 1,
    trace_dir: Annotated[Path | None, typer.Option(help="Profile the last step into rank<N>.json traces "
                                                        "(same format as `plait simulate --trace`).")] = None,
    engine: Annotated[str, typer.Option(help="plait (plait's own runtime) or torchtitan (launches the torchtitan "
                                             "package with plait's exported configuration; CUDA only).")] = "plait",
    out: Annotated[Path | None, typer.Option(help="torchtitan: folder for its assets and outputs (default: a "
                                                  "temporary folder).")] = None,
    model: Annotated[str | None, typer.Option(help="A DLRM TOML (instead of --plan): train it on TorchRec.")] = None,
    gpus: Annotated[int, typer.Option(help="With a DLRM: ranks.")] = 2,
    global_batch: Annotated[int, typer.Option(help="With a DLRM: samples per step.")] = 8,
    placements: Annotated[str | None, typer.Option(help="With a DLRM: each table's sharding, e.g. t0=row_wise,"
                                                        "t1=table_wise@1 (default: plait's planner).")] = None,
    optimizer: Annotated[str, typer.Option(help="With a DLRM: sgd | rowwise_adagrad (fused into the embedding "
                                                "backward; the dense part takes SGD or AdaGrad).")] = "sgd",
    parallel: Annotated[str | None, typer.Option(help="With a DiT TOML: ulysses=N or distrifusion=N.")] = None,
    gnn_strategy: Annotated[str, typer.Option(help="With a GNN TOML: sampled_dp | replicated | partition_local | "
                                                   "llcg | full_graph (GNNPipe, one layer per rank) run on CPU "
                                                   "ranks; host_features is costed only.")] = "sampled_dp",
    gnn_sampler: Annotated[str, typer.Option(help="With a GNN TOML and sampled_dp: loop | matrix[:bulk=K]"
                                                  "[,adjacency=replicated|partitioned].")] = "loop",
    cache_fraction: Annotated[float, typer.Option(help="With a GNN TOML: nodes whose features every rank "
                                                       "caches.")] = 0.0,
    slowdown: Annotated[str | None, typer.Option(help="Per rank: times slower at compute, e.g. 1,3 (a sleep after "
                                                      "each pass emulates a slower device; plait.run.slowdown).")] = None,
    batch_split: Annotated[str | None, typer.Option(help="Per data-parallel rank: sequences per step, summing to "
                                                         "global_batch, e.g. 12,4 (gradients equal the even "
                                                         "split's).")] = None,
    stage_layers: Annotated[str | None, typer.Option(help="Per pipeline stage: layers it holds, summing to the "
                                                          "model's, e.g. 3,1.")] = None,
) -> None:
    """Run a plan on PyTorch's distributed engine; print measured vs predicted step time and memory.

    --model DLRM.toml trains a recommendation model's table placement on TorchRec (DistributedModelParallel);
    --model GNN.toml or DIT.toml runs plait's GNN or DiT workers on CPU ranks next to one process."""
    options = dict(locals())
    from plait.run.uneven import argv as uneven_argv
    from plait.run.uneven import check_uneven, parse_uneven

    uneven = parse_uneven(slowdown, batch_split, stage_layers)
    uneven_args = uneven_argv(uneven)  # the worker's options; empty for an even run
    if uneven_args and (model is not None or engine != "plait"):
        raise ConfigError(f"{' '.join(uneven_args)}: runs a --plan on plait's runtime (--engine plait) only")
    if model is not None:
        workload = load(model)
        if plan is not None or workload.kind.run is None:
            raise ConfigError(f"--model {model!r}: plait run takes a {labels_with('run')} TOML as --model, "
                              "anything else as --plan")
        workload.kind.run(workload, options)
        return
    if plan is None:
        raise ConfigError("plait run needs --plan (a plan TOML), or --model with a DLRM TOML")
    job, the_plan = read_plan_file(plan)
    model = resolve_model(job.model)
    check_uneven(uneven, the_plan.with_seq_len(model.seq_len), model.num_layers)
    if engine not in ("plait", "torchtitan"):
        raise ConfigError(f"engine={engine!r} must be plait or torchtitan (the engines plait run can launch)")
    if engine == "torchtitan":
        _run_torchtitan(job.model, model, the_plan, steps, out, dry_run)
        return
    if metrics is not None and metrics.exists():
        raise ConfigError(f"metrics file {str(metrics)!r} already exists; choose another path")
    gpus = the_plan.num_gpus
    _check_checkpointing(checkpoint_dir, checkpoint_at, checkpoint_every, keep, resume, reshard, steps, model, the_plan)
    if max_restarts < 0 or (max_restarts and not (checkpoint_dir and checkpoint_every)):
        raise ConfigError(f"--max-restarts={max_restarts} must be >= 0, and a restart resumes from the newest "
                          "checkpoint: pass --checkpoint-dir and --checkpoint-every with it")
    if on_nonfinite not in ("stop", "skip"):
        raise ConfigError(f"--on-nonfinite={on_nonfinite!r} must be stop or skip")
    extra = ["--steps", str(steps), "--keep", str(keep), "--on-nonfinite", on_nonfinite, *uneven_args]
    for flag, value in (("--cluster", cluster), ("--checkpoint-dir", checkpoint_dir),
                        ("--checkpoint-at", checkpoint_at or None), ("--checkpoint-every", checkpoint_every or None),
                        ("--trace-dir", trace_dir)):
        if value is not None:
            extra += [flag, str(value)]
    console = Console()
    if not full_precision and nodes == 1 and local_slots() is None:
        from plait.run.precision import cpu_fallback_note

        note = cpu_fallback_note(the_plan.precision)
        if note:
            console.print(f"plait: {note}")
            full_precision = True
    extra += [f for f, on in (("--resume", resume), ("--reshard", reshard), ("--full-precision", full_precision),
                              ("--dry-run", dry_run), ("--async-save", async_save)) if on]
    if nodes > 1:
        if gpus % nodes:
            raise ConfigError(f"gpus={gpus} must be divisible by nodes={nodes}")
        console.print(multinode_command(plan, nodes, gpus // nodes, extra))
        return
    from plait.plan.rules import check_plan
    from plait.run.support import check_runnable

    hardware = resolve_cluster(cluster or job.cluster or "dgx-h100-ib")
    check_plan(the_plan.with_seq_len(model.seq_len), model, hardware)  # the plan's own rules, then the runtime's
    check_runnable(the_plan.with_seq_len(model.seq_len), model, on_gpu=local_slots() is not None)
    slots = local_slots()
    if slots is not None and gpus > slots:
        raise ConfigError(f"the plan needs {gpus} GPUs but this node has {slots}; pass --nodes to get the torchrun command")
    predicted = estimate(model, hardware, the_plan, engine=get_engine("plait"))
    mixed = None
    if uneven_args:  # each rank a group of one, slowed as the run slows it (plait.cli.run_uneven)
        from plait.cli.run_uneven import predict_uneven

        mixed = predict_uneven(model, hardware, the_plan, uneven)
    _check_machine(gpus, slots, predicted)
    with tempfile.TemporaryDirectory() as tmp:
        path = metrics or Path(tmp) / "metrics.jsonl"
        code = run_local(plan, gpus, [*extra, "--metrics", str(path)], max_restarts)
        if code != 0:
            raise typer.Exit(code if code != 2 else 2)
        if dry_run:
            return
        rows = [json.loads(line) for line in path.read_text().splitlines()]
    if not rows:
        return
    steady = [r["step_time_s"] for r in rows[1:]] or [rows[0]["step_time_s"]]
    table = Table(title=f"{model.name}: {the_plan.describe()} on {gpus} ranks", title_justify="left")
    for col in ("", "measured", f"predicted ({hardware.name})"):
        table.add_column(col, justify="right")
    # methods that synchronize every few steps (or skip steps' compute) are predicted as their mean step
    periodic = the_plan.dp_sync.infrequent
    summary = statistics.fmean(steady) if periodic else statistics.median(steady)
    table.add_row(f"step time s ({'mean' if periodic else 'median'} after step 1)", f"{summary:.4f}",
                  f"{(mixed or predicted).step_time_s:.4f}")
    table.add_row("peak memory GiB", f"{max(r['peak_memory_bytes'] for r in rows) / GIB:.3f}",
                  f"{predicted.memory.total_bytes / GIB:.3f}")
    losses = [r["loss"] for r in rows if r["loss"] is not None]  # PALSGD's pseudo-synchronization steps: null
    table.add_row("final loss", f"{losses[-1]:.4f}" if losses else "-", "")
    console.print(table)
    if mixed is not None:
        console.print(f"note: step time predicted by plait.predict.hetero, each rank a device group of one ("
                      f"{mixed.plan.describe()}); memory for the even plan")
    elif uneven_args:
        console.print("note: predicted for the even plan on equal ranks (an uneven prediction takes layouts whose "
                      "ranks are all data-parallel replicas or all pipeline stages)")
    if slots is None and not hardware.source.startswith("measured by plait calibrate"):
        console.print(f"note: predicted for {hardware.name}, not this CPU; `plait calibrate` measures this machine "
                      "for --cluster calibrated.toml")


RANKS_PER_CORE = 2
"""CPU ranks allowed per core. Assumed: gloo ranks beyond two per core mostly wait on the scheduler; this
project's tests run 4 ranks on its 2-core machine."""


def check_cpu_machine(ranks: int, bytes_per_rank: float) -> None:
    """Refuse more CPU ranks than this machine's cores take, or more memory than it has (plait's estimate)."""
    from plait.run.lifecycle import available_memory_bytes
    from plait.search.parts import available_cores

    cores = available_cores()
    if ranks > RANKS_PER_CORE * cores:
        raise ConfigError(f"the plan needs {ranks} ranks but this CPU machine has {cores} cores "
                          f"(at most {RANKS_PER_CORE * cores} ranks: {RANKS_PER_CORE} per core)")
    free = available_memory_bytes()
    if free is not None and bytes_per_rank * ranks > free:
        raise ConfigError(f"the plan needs about {bytes_per_rank / GIB:.1f} GiB per rank x {ranks} ranks = "
                          f"{bytes_per_rank * ranks / GIB:.1f} GiB (plait's estimate) but this machine has "
                          f"{free / GIB:.1f} GiB available")


def _check_machine(ranks: int, slots: int | None, predicted) -> None:  # type: ignore[no-untyped-def]
    """Refuse, before a process starts, a plan this machine cannot hold: more CPU ranks than its cores take, or
    more memory than it has by plait's own estimate (device memory per GPU; host memory for all CPU ranks)."""
    if slots is None:
        check_cpu_machine(ranks, predicted.memory.total_bytes - predicted.memory.runtime_reserved_bytes)
        return
    import torch

    capacity = torch.cuda.get_device_properties(0).total_memory
    if predicted.memory.total_bytes > capacity:
        raise ConfigError(f"the plan needs about {predicted.memory.total_bytes / GIB:.1f} GiB per GPU (plait's "
                          f"estimate) but this GPU has {capacity / GIB:.1f} GiB")


def _check_checkpointing(folder: Path | None, at: int, every: int, keep: int, resume: bool, reshard: bool,
                         steps: int, model, plan) -> None:  # type: ignore[no-untyped-def]
    """Every checkpoint check that can run before a rank starts: the options, a writable folder, and a resumable,
    undamaged checkpoint of this run."""
    if steps < 1 or at < 0 or every < 0 or keep < 1:
        raise ConfigError(f"--steps={steps} and --keep={keep} must be >= 1, --checkpoint-at={at} and "
                          f"--checkpoint-every={every} >= 0")
    from plait.run import checkpoint
    from plait.run.train import TrainConfig

    checkpoint.check_options(folder, resume, at, every)
    if folder is None:
        return

    if at or every:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder):
                pass
        except OSError as exc:
            raise ConfigError(f"checkpoint folder {str(folder)!r} is not writable ({exc.strerror})") from exc
        _check_room(folder, at, every, keep, steps, model, plan)
    if resume:
        identity = checkpoint.RunIdentity(plan=plan.with_seq_len(model.seq_len).to_dict(), model=model.name,
                                          steps=steps, seed=TrainConfig.seed)
        checkpoint.choose(folder, identity, reshard)


def checkpoint_bytes(model, plan) -> float:  # type: ignore[no-untyped-def]
    """Bytes of one checkpoint of plait's runtime: its fp32 parameters are the master copy (bf16 is an autocast or
    FSDP2 compute dtype), so a checkpoint is the cost model's optimizer state per parameter — fp32 master, AdamW
    two moments or SGD one momentum buffer (:func:`plait.cost.memory.optimizer_bytes_per_param`) — each written
    once however it is sharded or replicated (DCP deduplicates replicas)."""
    return model.total_params() * float(optimizer_bytes_per_param(PlanColumns.one(plan)))


def checkpoint_saves(at: int, every: int, steps: int) -> int:
    """Saves of a run of ``steps`` steps: after step ``at`` and every ``every`` steps (0: never), a step that is
    both saved once; counted without walking the steps (a user may ask for 2^63)."""
    periodic = steps // every if every else 0
    return periodic + (1 if 1 <= at <= steps and not (every and at % every == 0) else 0)


def _check_room(folder: Path, at: int, every: int, keep: int, steps: int, model, plan) -> None:  # type: ignore[no-untyped-def]
    """Refuse a run whose checkpoints cannot fit: at its peak the folder holds ``keep`` of this run's checkpoints
    plus the one being written; what is already there is pruned as new ones are published."""
    saves = checkpoint_saves(at, every, steps)
    size = checkpoint_bytes(model, plan)
    existing = _published_bytes(folder)
    # older checkpoints are pruned only after a new one is published: the first save always needs its own room
    need = max(size, size * min(saves, keep + 1) - existing) if saves else 0.0
    free = shutil.disk_usage(folder).free
    if need > free:
        raise ConfigError(f"checkpoint folder {str(folder)!r} has {free / GIB:.2f} GiB free; {saves} save(s) of "
                          f"{size / GIB:.2f} GiB each, {keep} kept, need {need / GIB:.2f} GiB more")


def _published_bytes(folder: Path) -> int:
    """Bytes of the checkpoints already published in ``folder`` (``step-<n>/``), which the run prunes as it publishes
    its own; other files there stay and free nothing (and a folder such as ``/`` is not walked)."""
    from plait.run import checkpoint

    total = 0
    try:
        for step in checkpoint.published(folder):
            total += sum(f.stat().st_size for f in step.rglob("*") if f.is_file())
    except OSError as exc:
        raise ConfigError(f"checkpoint folder {str(folder)!r} cannot be read ({exc.strerror})") from exc
    return total


def _run_torchtitan(model_slug: str, model, plan, steps: int, out: Path | None, dry_run: bool) -> None:  # type: ignore[no-untyped-def]
    """Refuse what torchtitan or this machine cannot run, before anything starts; then launch torchtitan."""
    import subprocess

    from plait.engine.capability import first_unsupported
    from plait.run.torchtitan import describe, launch_command, trainer_args, write_assets

    titan = get_engine("torchtitan")
    slots = local_slots()
    refusal = first_unsupported(plan.with_seq_len(model.seq_len), model, titan, "cuda" if slots else "cpu")
    if refusal:
        raise ConfigError(refusal)
    if slots is None and not dry_run:
        raise ConfigError("engine=torchtitan: torchtitan's trainer runs on CUDA (torchtitan/trainer.py); "
                          "this machine has no GPU (use --engine plait, or --dry-run to see the command)")
    if slots is not None and plan.num_gpus > slots:
        raise ConfigError(f"the plan needs {plan.num_gpus} GPUs but this node has {slots}")
    folder = out or Path(tempfile.mkdtemp(prefix="plait-torchtitan-"))
    try:
        tokenizer_dir, data_dir = write_assets(folder)
    except OSError as exc:
        raise ConfigError(f"--out {str(folder)!r} must be a folder plait can write torchtitan's assets into "
                          f"({exc.strerror})") from exc
    command = launch_command(plan.num_gpus, trainer_args(plan.with_seq_len(model.seq_len), model_slug, model,
                                                         tokenizer_dir, data_dir, folder / "outputs", steps))
    Console().print(describe(command))
    if slots is None:
        Console().print("dry run: torchtitan's trainer needs CUDA, which this machine lacks; the command above is what "
                        "a GPU node runs")
    if not dry_run:
        code = subprocess.run(command, check=False).returncode
        if code != 0:
            raise typer.Exit(code)
