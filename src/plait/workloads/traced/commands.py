"""The traced kind's entries: ``plait estimate``'s layout options priced, ``plait plan``'s search, printed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer
from rich.console import Console

from plait.cost.estimate import Estimate
from plait.engine.catalog import DEFAULT_ENGINE, get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import DEFAULT_CLUSTER, resolve_cluster
from plait.plan.defaults import LAYOUT_OPTIONS, plan_from_options
from plait.plan.io import JobSpec, job_path_for, write_plan_file
from plait.plan.plan import Plan
from plait.search.explain import runner_up_gives_up, why_winner
from plait.search.planner import parse_batches
from plait.strict_json import print_json
from plait.sync import ALLREDUCE, parse
from plait.terminal import rich_console, titled_table
from plait.units import GIB
from plait.workloads import Options, Workload
from plait.workloads.traced.predict import parse_loader, parse_shape, predict_traced
from plait.workloads.traced.search import search_traced
from plait.workloads.traced.tracing import storage_dtype, trace


def price(workload: Workload, options: Options) -> Estimate:
    """``plait estimate``'s layout options on the traced module: one replica's batch at once, unsharded, unless
    asked otherwise (a CNN's habit)."""
    gpus, global_batch = options["gpus"], options["global_batch"]
    micro_batch = options["micro_batch"]
    if micro_batch is None:
        micro_batch = max(1, global_batch * options["tp"] * options["pp"] * options["cp"] // max(gpus, 1))
    if options["plan_file"] is not None:
        raise ConfigError("a traced model (--model MODULE:FACTORY) takes layout options, not --plan")
    plan = plan_from_options(gpus=gpus, micro_batch=micro_batch,
                             **{**{k: options[k] for k in LAYOUT_OPTIONS}, "sharding": options["sharding"] or "none"})
    plan = replace(plan, sp=False)  # sequence parallelism splits a transformer's norms; a traced pair has none
    work = trace(str(workload.source), parse_shape(options["input_shape"]), options["input_dtype"],
                 storage_dtype(options["precision"]))
    return predict_traced(work, resolve_cluster(options["cluster"] or DEFAULT_CLUSTER), plan,
                          get_engine(options["engine"] or workload.kind.engine or DEFAULT_ENGINE),
                          parse_loader(options["loader"]), options["channels_last"])


def plan(workload: Workload, options: Options) -> None:
    """``plait plan``: data and pipeline parallelism, ZeRO stages, micro-batches, recomputation and the
    ``--dp-sync`` methods searched for throughput (:func:`plait.workloads.traced.search.search_traced`)."""
    if options["objective"] != "throughput" or options["gpus_range"]:
        raise ConfigError("a traced model (--model MODULE:FACTORY) is planned for throughput on --gpus")
    batches = parse_batches(options["global_batch"])
    if len(batches) != 1:
        raise ConfigError(f"--global-batch {options['global_batch']!r}: a traced model is planned at one global batch")
    syncs = tuple(dict.fromkeys([ALLREDUCE, *(parse(s) for s in options["dp_sync"] or ())]))
    work = trace(str(workload.source), parse_shape(options["input_shape"]), options["input_dtype"],
                 storage_dtype(options["precision"]))
    gpus, top = options["gpus"], options["top"]
    result = search_traced(work, resolve_cluster(options["cluster"]), gpus, batches[0], syncs,
                           get_engine(options["engine"] or workload.kind.engine or DEFAULT_ENGINE),
                           options["memory_margin"],
                           options["precision"] or "bf16", parse_loader(options["loader"]), options["channels_last"])
    if options["as_json"]:
        print_json({"model": work.name, "gpus": gpus, "candidates": result.candidates,
                    "feasible": len(result.ranked), "infeasible_by_reason": dict(result.reasons),
                    "tensor_parallelism": result.tp_note,
                    "top": [e.to_dict() for e in result.ranked[:top]],
                    "why": why_winner(result.ranked[0]) if result.ranked else None,
                    "runner_up": runner_up_gives_up(*result.ranked[:2]) if len(result.ranked) > 1 else None})
    else:
        print_traced_search(rich_console(), work.name, gpus, result, top)
    if not result.ranked:
        raise typer.Exit(1)
    if options["export"] is not None:
        written = export_traced(work, result.ranked[0].plan, options["cluster"] or DEFAULT_CLUSTER, options["export"],
                                options["force"])
        if not options["as_json"]:
            rich_console().print(f"exported the winner to {written} (plait run --plan {written})")


def export_traced(work, plan: Plan, cluster: str, folder: Path, force: bool) -> Path:  # type: ignore[no-untyped-def]
    """The winner as ``folder/plan.toml`` for ``plait run --plan`` (engine plait: :mod:`.run`), naming the factory,
    its input and the cluster it was planned for; refused in one line where plait's runtime cannot run it."""
    from plait.workloads.traced.run import runtime_refusal

    refusal = runtime_refusal(plan)
    if refusal:
        raise ConfigError(f"cannot export: {refusal}")
    folder.mkdir(parents=True, exist_ok=True)
    spec = JobSpec(model=work.name, cluster=job_path_for(cluster, folder), gpus=plan.num_gpus, engine="plait",
                   input_shape=work.example_shape, input_dtype=work.input_dtype)
    path = folder / "plan.toml"
    write_plan_file(path, plan, spec, overwrite=force)
    return path


def print_traced_search(console: Console, name: str, gpus: int, result, top: int) -> None:  # type: ignore[no-untyped-def]
    """The ranked plans of a traced model (:func:`plait.workloads.traced.search.search_traced`)."""
    best = result.ranked[:top]
    table = titled_table(f"top {len(best)} plans for {name} on {gpus} GPUs ({result.candidates} candidates, "
                         f"{len(result.ranked)} fit)")
    for column in ("#", "layout", "step s", "samples/s", "MFU", "GiB", "bottleneck"):
        table.add_column(column, justify="left" if column in ("layout", "bottleneck") else "right")
    for i, est in enumerate(best, 1):
        table.add_row(str(i), est.plan.describe(), f"{est.step_time_s:.4g}", f"{est.tokens_per_s:,.0f}",
                      f"{100 * est.mfu:.1f}%", f"{est.memory.total_bytes / GIB:.1f}",
                      max(est.time.items(), key=lambda item: item[1])[0])
    console.print(table)
    for reason, count in result.reasons.most_common():
        console.print(f"not ranked ({count}): {reason}")
    if result.tp_note:
        console.print(result.tp_note)
    if best:
        console.print(f"why #1: {why_winner(best[0])}")
    if len(best) > 1:
        console.print(f"runner-up: {runner_up_gives_up(best[0], best[1])}")

