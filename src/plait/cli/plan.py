"""``plait plan``: search the strategy space, rank and explain plans, export the winner."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, get_args

import typer
from rich.console import Console

from plait.cli.mixed import mixed_plan
from plait.cli.options import DEFAULT_CLUSTER, DEFAULT_MODEL
from plait.cli.output import print_json
from plait.cli.progress import LazyProgress
from plait.cli.render_plan import print_points, print_relaxations, print_search
from plait.engine.catalog import DEFAULT_ENGINE, get_engine
from plait.errors import ConfigError, check_export_folder
from plait.export.artifact import write_artifacts
from plait.export.bundle import export_for, export_names
from plait.hardware.catalog import resolve_cluster
from plait.hardware.mixed_catalog import mixed_cluster
from plait.job import Job
from plait.plan.convergence import searched_specs
from plait.plan.plan import LIMIT, Precision
from plait.search.engine import RANK_BY, run_search
from plait.search.explain import runner_up_gives_up, why_winner
from plait.search.pareto import choose, pareto_front
from plait.search.planner import check_objective, gpu_counts, parse_gpu_range, relaxations, search_gpu_counts
from plait.search.planner import parse_batches as _batches
from plait.search.space import default_space
from plait.sync import ALLREDUCE, parse
from plait.workload.catalog import resolve_model
from plait.workloads import load

SITES_ENGINE = "plait"
"""The engine planned for on clusters that span sites (the one that runs every ``dp_sync`` method)."""


def plan_command(
    model: Annotated[str, typer.Option(help="Catalog model, config.json or model TOML.")] = DEFAULT_MODEL,
    cluster: Annotated[str, typer.Option(help="Cluster preset or TOML/YAML file.")] = DEFAULT_CLUSTER,
    engine: Annotated[str | None, typer.Option(help="Engine to rank for and export to: only plans it can run are "
                                                     "searched (see `plait engines`). [default: " + DEFAULT_ENGINE +
                                                     f", or {SITES_ENGINE} on a cluster that spans sites]")] = None,
    gpus: Annotated[int, typer.Option(help="GPUs (objective throughput).")] = 8,
    gpus_range: Annotated[str | None, typer.Option(help="LOW:HIGH GPU counts to compare (objectives cost, time).")] = None,
    global_batch: Annotated[str, typer.Option(help="Sequences per step: N, N,M,... or LOW:HIGH.")] = "128",
    seq_len: Annotated[int, typer.Option(help="Tokens per sequence (0: the model's).")] = 0,
    objective: Annotated[str, typer.Option(help="throughput | cost | time.")] = "throughput",
    tokens: Annotated[float, typer.Option(help="Tokens to train (objectives cost, time).")] = 1e12,
    deadline_days: Annotated[float | None, typer.Option(help="Limit on days to train.")] = None,
    budget_usd: Annotated[float | None, typer.Option(help="Limit on dollars to train.")] = None,
    top: Annotated[int, typer.Option(help="Plans to list.")] = 5,
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
    workers: Annotated[int | None, typer.Option(help="Processes that search pieces of the space (default: every core "
                                                     "for spaces of 100,000 candidates or more).")] = None,
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
    if rank_by not in RANK_BY:
        raise ConfigError(f"--rank-by={rank_by!r} must be one of {', '.join(RANK_BY)}")
    if rank_by != "p50" and objective != "throughput":
        raise ConfigError(f"--rank-by={rank_by} ranks the plans of objective throughput; objective {objective} "
                          "compares GPU counts at their best predicted step")
    model_spec, cluster_spec = resolve_model(model), resolve_cluster(cluster)
    # Across sites the methods that send less matter most, and only plait's runtime runs them (`plait engines`).
    the_engine = get_engine(engine or (SITES_ENGINE if cluster_spec.site_gpus else DEFAULT_ENGINE))
    batches = _batches(global_batch)
    if top < 1:
        raise ConfigError(f"--top={top} must be >= 1")
    for name, value, low in (("--gpus", gpus, 1), ("--seq-len", seq_len, 0), *(("--global-batch", b, 1) for b in batches)):
        if not low <= value <= LIMIT:
            raise ConfigError(f"{name}={value} must be between {low} and {LIMIT}")
    if export is not None:  # before the search: an existing file or an unexportable model is refused at once
        check_export_folder(export, export_names(the_engine, model), force)
    precisions = tuple(p.strip() for p in precision.split(",")) if precision else None
    for name in precisions or ():
        if name not in get_args(Precision):
            raise ConfigError(f"--precision {precision!r}: {name!r} must be one of {', '.join(get_args(Precision))}")
    syncs = tuple(dict.fromkeys([ALLREDUCE, *((parse(s) for s in dp_sync) if dp_sync else searched_specs())]))
    console = Console(stderr=as_json)
    if objective == "throughput":
        if gpus_range:
            raise ConfigError("--gpus-range needs objective cost or time; objective throughput takes --gpus")
        space = default_space(model_spec, cluster_spec, gpus, batches, seq_len=seq_len, memory_margin=memory_margin,
                              allow_tp_across_nodes=allow_tp_across_nodes, precisions=precisions, dp_syncs=syncs,
                              param_servers=not dp_sync)
        with LazyProgress(console, "searching plans") as progress:
            result = run_search(model_spec, cluster_spec, space, progress=progress, engine=the_engine, workers=workers,
                                rank_by=rank_by)
        if result.num_candidates == 0:
            raise ConfigError(f"gpus={gpus} has no tp*pp*cp factorisation within the model and cluster; "
                              f"nearest: gpus={max(8, 2 ** (gpus.bit_length()))}")
        best = result.top(top)
        fixes = relaxations(model_spec, cluster_spec, space, the_engine) if not best else []
        if as_json:
            print_json(_search_json(result, best, fixes))
        else:
            print_search(console, result, top)
            if not best:
                print_relaxations(console, result, fixes)
        if export and best:
            chosen = Job.checked(model_spec, cluster_spec, best[0].plan, the_engine)  # a searched plan: rules passed
            written = write_artifacts(export, export_for(chosen, model, cluster, export), overwrite=force)
            console.print(f"exported {', '.join(str(p) for p in written)}")
        if not best:
            raise typer.Exit(1)
        return
    if gpus_range is None:
        raise ConfigError(f"objective {objective} needs --gpus-range LOW:HIGH (e.g. 64:1024)")
    counts = gpu_counts(*parse_gpu_range(gpus_range), cluster_spec)
    with LazyProgress(console, "searching GPU counts") as progress:
        points = search_gpu_counts(model_spec, cluster_spec, counts, batches, tokens, seq_len=seq_len,
                                   memory_margin=memory_margin, allow_tp_across_nodes=allow_tp_across_nodes,
                                   precisions=precisions, progress=progress, engine=the_engine, workers=workers,
                                   dp_syncs=syncs)
    front = pareto_front(points)
    choice = choose(points, objective, deadline_days, budget_usd)
    if as_json:
        print_json({
            "objective": objective, "engine": the_engine.spec, "tokens": tokens,
            "points": [{"gpus": p.gpus, "layout": p.estimate.plan.describe(), "days": p.days, "dollars": p.dollars,
                        "tokens_per_s": p.estimate.tokens_per_s} for p in points],
            "pareto_gpus": [p.gpus for p in front],
            "choice": {"gpus": choice.gpus, "plan": choice.estimate.plan.to_dict(), "days": choice.days,
                       "dollars": choice.dollars},
        })
    else:
        print_points(console, points, front, choice, tokens)
    if export:
        chosen = Job.checked(model_spec, cluster_spec, choice.estimate.plan, the_engine)  # a searched plan
        written = write_artifacts(export, export_for(chosen, model, cluster, export), overwrite=force)
        console.print(f"exported {', '.join(str(p) for p in written)}")


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
