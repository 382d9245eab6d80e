"""``plait plan``: search the strategy space, rank and explain plans, export the winner."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from plait.cli.mixed import mixed_plan
from plait.cli.numbers import MAX_TOKENS, MAX_WORKERS, count, quantity
from plait.cli.options import DEFAULT_CLUSTER, DEFAULT_MODEL
from plait.cli.output import print_json
from plait.cli.progress import LazyProgress
from plait.cli.render_plan import print_points, print_relaxations, print_search
from plait.engine.catalog import DEFAULT_ENGINE
from plait.engine.choice import SITES_ENGINE
from plait.engine.engine import Engine
from plait.errors import ConfigError, check_export_folder
from plait.export.artifact import write_artifacts
from plait.export.bundle import export_for, export_names
from plait.hardware.mixed_catalog import mixed_cluster
from plait.job import Job
from plait.plan.plan import Plan
from plait.search.explain import runner_up_gives_up, why_winner
from plait.search.planner import check_objective
from plait.search.planner import parse_batches as _batches
from plait.search.request import Checked, CountPlans, PlanRequest, ThroughputPlans, plan_search
from plait.workloads import load

def plan_command(
    model: Annotated[str, typer.Option(help="Catalog model, config.json or model TOML.")] = DEFAULT_MODEL,
    cluster: Annotated[str, typer.Option(help="Cluster preset or TOML/YAML file.")] = DEFAULT_CLUSTER,
    engine: Annotated[str | None, typer.Option(help="Engine to rank for and export to: only plans it can run are "
                                                     "searched (see `plait engines`). [default: " + DEFAULT_ENGINE +
                                                     f", or {SITES_ENGINE} on a cluster that spans sites]")] = None,
    gpus: Annotated[int, typer.Option(help="GPUs (objective throughput).")] = 8,
    gpus_range: Annotated[str | None, typer.Option(help="LOW:HIGH GPU counts to compare (objectives cost, time): the powers of two between, at most 8.")] = None,
    global_batch: Annotated[str, typer.Option(help="Sequences per step: N, N,M,... or LOW:HIGH.")] = "128",
    seq_len: Annotated[int, typer.Option(help="Tokens per sequence (0: the model's).")] = 0,
    objective: Annotated[str, typer.Option(help="throughput | cost | time.")] = "throughput",
    tokens: Annotated[float, quantity("Tokens to train (objectives cost, time).", low=1, high=MAX_TOKENS,
                                      low_open=False)] = 1e12,
    deadline_days: Annotated[float | None, quantity("Limit on days to train.")] = None,
    budget_usd: Annotated[float | None, quantity("Limit on dollars to train.")] = None,
    top: Annotated[int, count("Plans to list.")] = 5,
    memory_margin: Annotated[float, typer.Option(help="Fraction of GPU memory kept free.")] = 0.05,
    allow_tp_across_nodes: Annotated[bool, typer.Option(help="Let tp and ep leave the scale-up domain.")] = False,
    precision: Annotated[str | None, typer.Option(help="Matmul precisions to try, e.g. bf16 or bf16,fp8.")] = None,
    dp_sync: Annotated[list[str] | None, typer.Option(help="A data-parallel synchronization method to try besides "
                                                           "allreduce, METHOD[:key=value,...]; repeat for more. "
                                                           "[default: every method with a steps multiplier in "
                                                           "plait's table; `--dp-sync allreduce` for none]")] = None,
    export: Annotated[Path | None, typer.Option(help="Write the winner as plan.toml and the engine's own configuration "
                                                     "(torchtitan, Megatron-LM or DeepSpeed) into this folder.")] = None,
    force: Annotated[bool, typer.Option(help="Replace existing export files.")] = False,
    workers: Annotated[int | None, count("Processes that search pieces of the space (default: every core for spaces "
                                         "of 100,000 candidates or more).", high=MAX_WORKERS)] = None,
    rank_by: Annotated[str, typer.Option(help="p50: rank by the predicted step time; p90: by its 90% bound (the plan "
                                              "that is fast even if the prediction is wrong).")] = "p50",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    input_shape: Annotated[str | None, typer.Option(help="With --model MODULE:FACTORY: one example's input shape, e.g. 3,224,224.")] = None,
    input_dtype: Annotated[str | None, typer.Option(help="With --model MODULE:FACTORY: float32 | bfloat16 | float16 | int64.")] = None,
) -> None:
    """Search every parallel layout and memory knob; rank plans and explain the winner.

    --model MODULE:FACTORY traces any PyTorch module and searches data and pipeline parallelism, ZeRO stages,
    micro-batches, recomputation and the --dp-sync methods (global batch in examples)."""
    options = dict(locals())
    check_objective(objective)
    mixed = mixed_cluster(cluster)
    if mixed is not None:
        if objective != "throughput" or gpus_range or export or "," in global_batch or ":" in global_batch:
            raise ConfigError("a mixed cluster is planned for throughput at one global batch over all its devices "
                              "(no --objective cost/time, --gpus-range, --export, or several batches)")
        mixed_plan(model, mixed, _batches(global_batch)[0], engine, top, memory_margin, as_json)
        return
    workload = load(model)
    if workload.kind.plan is not None:  # the kind searches and prints its own plans
        workload.kind.plan(workload, options)
        return
    request = PlanRequest(model=model, cluster=cluster, engine=engine, gpus=gpus, gpus_range=gpus_range,
                          global_batch=global_batch, seq_len=seq_len, objective=objective, tokens=tokens,
                          deadline_days=deadline_days, budget_usd=budget_usd, top=top, memory_margin=memory_margin,
                          allow_tp_across_nodes=allow_tp_across_nodes, precision=precision,
                          dp_sync=tuple(dp_sync) if dp_sync is not None else None, export=export,
                          workers=workers, rank_by=rank_by)
    console = Console(stderr=as_json)
    plans = plan_search(request, lambda label: LazyProgress(console, label),
                        lambda engine: _check_export(export, model, engine, force))
    if isinstance(plans, ThroughputPlans):
        _show_throughput(plans, console, as_json, force)
    else:
        _show_counts(plans, console, as_json, force)


def _show_throughput(plans: ThroughputPlans, console: Console, as_json: bool, force: bool) -> None:
    """The ranked plans (or the relaxations where none fits), the export, and exit code 1 where none fits."""
    result, best, fixes = plans.result, plans.best, plans.fixes
    if as_json:
        print_json(_search_json(result, best, fixes))
    else:
        print_search(console, result, plans.checked.request.top)
        if not best:
            print_relaxations(console, result, fixes)
    if plans.checked.request.export and best:
        written = _export(plans.checked, best[0].plan, force)
        console.print(f"exported {', '.join(str(p) for p in written)}")
    if not best:
        raise typer.Exit(1)


def _show_counts(plans: CountPlans, console: Console, as_json: bool, force: bool) -> None:
    """Each GPU count's best plan, the Pareto front and the choice; the chosen plan's export."""
    points, front, choice, request = plans.points, plans.front, plans.choice, plans.checked.request
    if as_json:
        print_json({
            "objective": request.objective, "engine": plans.checked.engine.spec, "tokens": request.tokens,
            "points": [{"gpus": p.gpus, "layout": p.estimate.plan.describe(), "days": p.days, "dollars": p.dollars,
                        "tokens_per_s": p.estimate.tokens_per_s} for p in points],
            "pareto_gpus": [p.gpus for p in front],
            "choice": {"gpus": choice.gpus, "plan": choice.estimate.plan.to_dict(), "days": choice.days,
                       "dollars": choice.dollars},
        })
    else:
        print_points(console, points, front, choice, request.tokens)
    if request.export:
        written = _export(plans.checked, choice.estimate.plan, force)
        console.print(f"exported {', '.join(str(p) for p in written)}")


def _check_export(folder: Path | None, model: str, engine: Engine, force: bool) -> None:
    """Before the search: an existing file in the export folder, or a model the engine cannot export, is refused."""
    assert folder is not None  # asked only where --export is given
    check_export_folder(folder, export_names(engine, model), force)


def _export(checked: Checked, plan: Plan, force: bool) -> list[Path]:
    """``plan`` as plan.toml and the engine's own configuration in the request's export folder; the files written."""
    request = checked.request
    assert request.export is not None
    job = Job.checked(checked.model, checked.cluster, plan, checked.engine)  # a searched plan: rules passed
    return write_artifacts(request.export, export_for(job, request.model, request.cluster, request.export),
                           overwrite=force)

def _search_json(result, best, fixes) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return {
        "objective": "throughput", "rank_by": result.rank_by, "model": result.model.name, "cluster": result.cluster.name,
        "engine": result.engine.spec,
        "gpus": result.space.gpus, "candidates": result.num_candidates, "costed": result.costed,
        "feasible": result.num_feasible, "elapsed_s": result.elapsed_s, "candidates_per_s": result.candidates_per_s,
        "interrupted": result.interrupted, "infeasible_by_reason": dict(result.reasons),
        "top": [{**e.to_dict(), "bottleneck": max(e.time.items(), key=lambda i: i[1])[0]} for e in best],
        "why": why_winner(best[0]) if best else None,
        "runner_up": runner_up_gives_up(best[0], best[1]) if len(best) > 1 else None,
        "relaxations": [{"change": r.change, "works": r.best is not None,
                         "best": r.best.plan.describe() if r.best else None} for r in fixes],
    }
