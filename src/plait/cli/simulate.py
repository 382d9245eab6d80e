"""``plait simulate`` and ``plait report``: a step's timeline, trace, pictures and the HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from plait.cli.numbers import MAX_TOKENS, quantity
from plait.cli.options import ENGINE_HELP, resolve_job
from plait.cli.output import print_json
from plait.errors import ConfigError, check_suffix, refuse_overwrite
from plait.predict.estimate import predict
from plait.search.pareto import pareto_front
from plait.search.planner import gpu_counts, parse_gpu_range, search_gpu_counts
from plait.simulate.costs import stage_memories
from plait.simulate.step import simulate_step
from plait.simulate.trace import write_trace
from plait.workloads import labels_with, load


def simulate_command(
    plan_file: Annotated[Path | None, typer.Option("--plan", help="Plan TOML file.")] = None,
    model: Annotated[str | None, typer.Option(help="Override the plan file's model; or a GNN or DiT TOML.")] = None,
    cluster: Annotated[str | None, typer.Option(help="Override the plan file's cluster.")] = None,
    engine: Annotated[str | None, typer.Option(help=ENGINE_HELP)] = None,
    trace: Annotated[Path | None, typer.Option(help="Write Chrome/Perfetto trace-event JSON here.")] = None,
    png: Annotated[Path | None, typer.Option(help="Write the timeline picture here.")] = None,
    force: Annotated[bool, typer.Option(help="Replace existing output files.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    gpus: Annotated[int, typer.Option(help="With a GNN or DiT TOML: GPUs.")] = 1,
    global_batch: Annotated[int, typer.Option(help="With a GNN TOML: seed nodes per step over all GPUs.")] = 1024,
    parallel: Annotated[str | None, typer.Option(help="With a DiT TOML: degrees KEY=N,... (as plait estimate).")] = None,
    gnn_strategy: Annotated[str, typer.Option(help="With a GNN TOML: the strategy (as plait estimate).")] = "sampled_dp",
) -> None:
    """Simulate one step rank by rank (pipeline schedule, transfers, gradient buckets); a DiT's whole generation
    (PipeFusion patch by patch) or a GNN step, phase by phase."""
    options = dict(locals())
    check_suffix(png, ".png", "--png")
    workload = load(model)
    if workload.kind.simulate is not None:  # the kind simulates its own step
        workload.kind.simulate(workload, options)
        return
    if plan_file is None:
        raise ConfigError("plait simulate needs --plan (a plan TOML), or --model with a "
                          f"{labels_with('simulate')} TOML")
    job = resolve_job(model, cluster, plan_file, None, engine)
    plan = job.plan
    refuse_overwrite(trace, force)
    refuse_overwrite(png, force)
    timeline = simulate_step(job)
    if trace:
        write_trace(trace, timeline, overwrite=force)
    if png:
        from plait.report.plots import timeline_png

        timeline_png(timeline, png, f"one step: {plan.describe()}")
    busy = {r: sum(s.end - s.start for s in timeline.spans if s.rank == r and s.stream == "compute")
            for r in {s.rank for s in timeline.spans}}
    doc = {"layout": plan.describe(), "step_time_s": timeline.step_time_s, "ranks": len(busy),
           "idle_fraction_per_rank": {r: 1 - b / timeline.step_time_s for r, b in sorted(busy.items())},
           "spans": len(timeline.spans)}
    if as_json:
        print_json(doc)
        return
    console = Console()
    console.print(f"simulated step: {timeline.step_time_s:.4g} s for {plan.describe()} ({len(timeline.spans)} spans)")
    for rank, idle in doc["idle_fraction_per_rank"].items():  # type: ignore[union-attr]
        console.print(f"  rank {rank}: idle {100 * idle:.1f}% of the step")
    for path in (trace, png):
        if path:
            console.print(f"wrote {path}")


def report_command(
    plan_file: Annotated[Path, typer.Option("--plan", help="Plan TOML file.")],
    out: Annotated[Path, typer.Option(help="HTML file to write.")] = Path("report.html"),
    model: Annotated[str | None, typer.Option(help="Override the plan file's model.")] = None,
    cluster: Annotated[str | None, typer.Option(help="Override the plan file's cluster.")] = None,
    engine: Annotated[str | None, typer.Option(help=ENGINE_HELP)] = None,
    gpus_range: Annotated[str | None, typer.Option(help="LOW:HIGH GPU counts for the Pareto picture: the powers of two between, at most 8.")] = None,
    tokens: Annotated[float, quantity("Tokens to train for the Pareto picture.", low=1, high=MAX_TOKENS,
                                      low_open=False)] = 1e12,
    force: Annotated[bool, typer.Option(help="Replace an existing file.")] = False,
) -> None:
    """Write one self-contained HTML page: plan, breakdowns, timeline, memory per stage, Pareto front."""
    from plait.report.html import render_report

    bounds = parse_gpu_range(gpus_range) if gpus_range else None
    job = resolve_job(model, cluster, plan_file, None, engine)
    model_spec, cluster_spec, plan = job.model, job.cluster, job.plan
    refuse_overwrite(out, force)
    timeline = simulate_step(job)
    # every pipeline re-timed, by the page's own simulated step rather than a second simulation
    est = predict(job, simulate=True, timeline=timeline)
    points = front = None
    if bounds:
        points = search_gpu_counts(model_spec, cluster_spec, gpu_counts(*bounds, cluster_spec),
                                   (plan.global_batch,), tokens, seq_len=plan.seq_len, engine=job.engine)
        front = pareto_front(points)
    page = render_report(est, timeline, stage_memories(job), points, front)
    out.write_text(page, encoding="utf-8")
    Console().print(f"wrote {out} ({len(page) / 1024:.0f} KiB)")
