"""``plait run``: train a plan on torch.distributed and compare with the prediction."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from plait.cli.numbers import count
from plait.errors import ConfigError
from plait.plan.io import read_plan_parts
from plait.run.launch import RanksFailed
from plait.run.plan_run import PlanRun, RunReport, run_plan
from plait.run.uneven import argv as uneven_argv
from plait.run.uneven import parse_uneven
from plait.run.worker_config import WorkerConfig
from plait.terminal import rich_console, titled_table
from plait.units import format_bytes
from plait.workloads import labels_with, load


def run_command(
    plan: Annotated[Path | None, typer.Option(help="Plan TOML ([job] model and [plan]).")] = None,
    steps: Annotated[int, count("Optimizer steps (a federated job TOML: rounds).")] = 10,
    cluster: Annotated[str | None, typer.Option(help="Hardware description for the prediction "
                                                     "(preset, file, or the output of `plait calibrate`).")] = None,
    metrics: Annotated[Path | None, typer.Option(help="JSON-lines file for per-step metrics, one line per step, "
                                                      "appended to a file that exists (a resumed run continues "
                                                      "its file; each line names its step).")] = None,
    checkpoint_dir: Annotated[Path | None, typer.Option(help="Distributed checkpoint folder.")] = None,
    checkpoint_at: Annotated[int, count("Save after this many steps (0: never).", low=0)] = 0,
    checkpoint_every: Annotated[int, count("Save every this many steps (0: never).", low=0)] = 0,
    keep: Annotated[int, count("Newest checkpoints kept in --checkpoint-dir.")] = 2,
    async_save: Annotated[bool, typer.Option(help="Write checkpoints in the background (torch.distributed.checkpoint."
                                                  "async_save); each is published when the next save starts or the "
                                                  "run ends.")] = False,
    resume: Annotated[bool, typer.Option(help="Resume from the newest checkpoint in --checkpoint-dir (verified); "
                                              "the run says which and at which step.")] = False,
    reshard: Annotated[bool, typer.Option(help="Resume a checkpoint saved by another plan into this one.")] = False,
    on_nonfinite: Annotated[str, typer.Option(help="A step with a non-finite gradient norm: stop (exit code 3) or "
                                                   "skip its update.")] = "stop",
    max_restarts: Annotated[int, count("Restart every rank after a failure, up to this many times, from the newest "
                                       "valid checkpoint (torchrun's elastic agent); each restart is said with the "
                                       "rank that failed and how.", low=0)] = 0,
    full_precision: Annotated[bool, typer.Option(help="Train in fp32 (ignore the plan's precision).")] = False,
    dry_run: Annotated[bool, typer.Option(help="Build every mesh, group and stage, validate, do not train.")] = False,
    nodes: Annotated[int, count("Nodes, at least 1, dividing the plan's GPUs (more than one prints the torchrun "
                                "command to run on each).")] = 1,
    trace_dir: Annotated[Path | None, typer.Option(help="Profile the last step into rank<N>.json traces "
                                                        "(same format as `plait simulate --trace`).")] = None,
    engine: Annotated[str, typer.Option(help="plait (plait's own runtime) or torchtitan (launches the torchtitan "
                                             "package with plait's exported configuration; CUDA only).")] = "plait",
    out: Annotated[Path | None, typer.Option(help="torchtitan: folder for its assets and outputs (default: a "
                                                  "temporary folder).")] = None,
    model: Annotated[str | None, typer.Option(help="A DLRM TOML (instead of --plan): train it on TorchRec.")] = None,
    gpus: Annotated[int, count("With a DLRM: ranks.")] = 2,
    global_batch: Annotated[int, count("With a DLRM: samples per step.")] = 8,
    placements: Annotated[str | None, typer.Option(help="With a DLRM: each table's sharding, e.g. t0=row_wise,"
                                                        "t1=table_wise@1 (default: plait's planner).")] = None,
    sparse_group: Annotated[int | None, typer.Option(help="With a DLRM: ranks that share the tables (2D sparse "
                                                          "parallelism on TorchRec's DMPCollection: gpus / this many "
                                                          "replicas, averaged after each step). [default: all]")] = None,
    optimizer: Annotated[str, typer.Option(help="With a DLRM: sgd | rowwise_adagrad (fused into the embedding "
                                                "backward; the dense part takes SGD or AdaGrad).")] = "sgd",
    parallel: Annotated[str | None, typer.Option(help="With a DiT TOML: its plan as plait plan labels it, e.g. "
                                                      "cfg=2,ulysses=2 or pipefusion=2,patches=4.")] = None,
    gnn_strategy: Annotated[str, typer.Option(help="With a GNN TOML: sampled_dp | replicated | host_features "
                                                   "(on CPU ranks as replicated) | partition_local | llcg | "
                                                   "full_graph (GNNPipe, one layer per rank), on CPU ranks.")] = "sampled_dp",
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
    local_steps: Annotated[str | None, typer.Option(help="With dp_sync local_sgd, per data-parallel rank: local steps "
                                                         "per averaging round, e.g. 16,4 (--steps: the plan's period's "
                                                         "steps, whole rounds).")] = None,
) -> None:
    """Run a plan on PyTorch's distributed engine; print measured vs predicted step time and memory.

    --model DLRM.toml trains a recommendation model's table placement on TorchRec (DistributedModelParallel);
    --model GNN.toml or DIT.toml runs plait's GNN or DiT workers on CPU ranks next to one process; --model
    FEDERATED.toml runs PFLEGO and FedAvg with a server rank and client ranks.
    A mixed plan file (`plait plan --cluster <mixed> --gpus N --export DIR`) runs its shares, each device group's
    ranks slowed to the group's predicted speed.

    The ranks' full output goes to plait-run.log in the run's folder (--checkpoint-dir, else the --metrics file's
    folder, else the current one), replaced by the next run there and removed when the run succeeds.

    Exit codes: 0 done (also a dry run, or the multi-node command printed); 1 a rank failed (crashed or was killed);
    2 bad input, refused in one line; 3 a step's gradient norm was not finite (--on-nonfinite stop);
    128+N a signal N stopped plait or its launcher torchrun (130 Ctrl-C, 137 SIGKILL, 143 SIGTERM)."""
    options = dict(locals())
    uneven = parse_uneven(slowdown, batch_split, stage_layers, local_steps)
    uneven_args = uneven_argv(uneven)  # the worker's options; empty for an even run
    if uneven_args and (model is not None or engine != "plait"):
        raise ConfigError(f"{' '.join(uneven_args)}: runs a --plan on plait's runtime (--engine plait) only")
    if model is not None:
        if nodes != 1:
            raise ConfigError(f"--nodes={nodes}: a --model TOML runs on this node only (--nodes takes a --plan)")
        workload = load(model)
        if plan is not None or workload.kind.run is None:
            raise ConfigError(f"--model {model!r}: plait run takes a {labels_with('run')} TOML as --model, "
                              "anything else as --plan")
        _run_kind(workload.kind.run, workload, options)
        return
    if plan is None:
        raise ConfigError("plait run needs --plan (a plan TOML), or --model with a DLRM TOML")
    planned = load(read_plan_parts(plan)[0].model or None)  # a mixed plan file too (plait.run.mixed_run)
    if planned.kind.run_plan is not None:  # a kind whose plans its own worker runs (a traced module's)
        _run_kind(planned.kind.run_plan, planned, options)
        return
    if sparse_group is not None:
        raise ConfigError(f"--sparse-group={sparse_group}: places a DLRM's tables; pass --model with a DLRM TOML")
    config = WorkerConfig(plan=plan, steps=steps, keep=keep, on_nonfinite=on_nonfinite,  # type: ignore[arg-type]
                          slowdown=uneven.slowdown, batch_split=uneven.batch_split, stage_layers=uneven.stage_layers,
                          local_steps=uneven.local_steps,
                          cluster=cluster, checkpoint_dir=checkpoint_dir, checkpoint_at=checkpoint_at,
                          checkpoint_every=checkpoint_every, trace_dir=trace_dir, resume=resume, reshard=reshard,
                          full_precision=full_precision, dry_run=dry_run, async_save=async_save, metrics=metrics)
    console = rich_console()
    outcome = run_plan(PlanRun(config=config, engine=engine, nodes=nodes, max_restarts=max_restarts, out=out),
                       console.print)
    if outcome.exit_code != 0:
        raise typer.Exit(outcome.exit_code)
    if outcome.report is not None:
        render_run(outcome.report, console)


def _run_kind(entry: Any, workload: Any, options: dict[str, Any]) -> None:
    """A workload kind's own run entry; its workers' failure is the run's exit code (plait.run.narration)."""
    try:
        entry(workload, options)
    except RanksFailed as exc:
        raise typer.Exit(exc.code) from None


def render_run(report: RunReport, console: Console) -> None:
    """The measured run beside its prediction: step time, peak memory, final loss, and the notes that qualify it."""
    rows, predicted = report.rows, report.predicted
    steady = [r["step_time_s"] for r in rows[1:]] or [rows[0]["step_time_s"]]
    table = titled_table(f"{report.model.name}: {report.plan.describe()} on {report.plan.num_gpus} ranks")
    for col in ("", "measured", f"predicted ({report.hardware.name})"):
        table.add_column(col, justify="right")
    # methods that synchronize every few steps (or skip steps' compute) are predicted as their mean step
    periodic = report.plan.dp_sync.infrequent
    summary = statistics.fmean(steady) if periodic else statistics.median(steady)
    table.add_row(f"step time s ({'mean' if periodic else 'median'} after step 1)", f"{summary:.4f}",
                  f"{report.predicted_step_s:.4f}")
    table.add_row("peak memory", format_bytes(max(r["peak_memory_bytes"] for r in rows)),
                  format_bytes(predicted.memory.total_bytes))
    losses = [r["loss"] for r in rows if r["loss"] is not None]  # PALSGD's pseudo-synchronization steps: null
    table.add_row("final loss", f"{losses[-1]:.4f}" if losses else "-", "")
    console.print(table)
    if report.planned is not None:
        unit = "averaging round" if report.planned.plan.plan.dp_sync.group_local_steps else "step"
        console.print(f"note: on {report.planned.cluster_name} plait predicts {report.planned.step_time_s:.4f} s a "
                      f"{unit} ({report.planned.tokens_per_s:,.0f} tokens/s); the table is this machine's emulation")
    if report.mixed is not None:
        console.print(f"note: step time predicted by plait.predict.mixed, each rank a device group of one ("
                      f"{report.mixed.plan.describe()}); memory for the even plan")
    elif report.uneven:
        console.print("note: predicted for the even plan on equal ranks (an uneven prediction takes layouts whose "
                      "ranks are all data-parallel replicas or all pipeline stages)")
    if not report.on_gpu and not report.hardware.source.startswith("measured by plait calibrate"):
        console.print(f"note: predicted for {report.hardware.name}, not this CPU; `plait calibrate` measures this "
                      "machine for --cluster calibrated.toml")
