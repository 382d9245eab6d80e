"""``plait simulate`` and ``plait report``: a step's timeline, trace, pictures and the HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from plait.cli.options import (
    DEFAULT_GPUS,
    ClusterOption,
    CpAttentionOption,
    CpOption,
    DpReplicateOption,
    DpSyncOption,
    EngineOption,
    EpOption,
    ForceOption,
    GlobalBatchOption,
    GnnStrategyOption,
    GpusOption,
    GpusRangeOption,
    JsonOption,
    MicroBatchOption,
    ModelOption,
    OffloadOptimizerOption,
    OffloadParamsOption,
    ParallelOption,
    PlanFileOption,
    PpOption,
    PrecisionOption,
    RecomputeLayersOption,
    RecomputeOption,
    ScheduleOption,
    SeqLenOption,
    ShardingOption,
    SpOption,
    SwapActivationsOption,
    SwapLayersOption,
    TokensOption,
    TpOption,
    VppOption,
    refuse_layout_with_plan,
)
from plait.cli.output import print_json
from plait.errors import ConfigError, check_suffix, refuse_overwrite
from plait.job import Job
from plait.plan.defaults import GLOBAL_BATCH
from plait.predict.estimate import predict
from plait.search.pareto import pareto_front
from plait.search.planner import gpu_counts, parse_gpu_range, search_gpu_counts
from plait.simulate.costs import stage_memories
from plait.simulate.step import simulate_step
from plait.simulate.trace import write_trace
from plait.terminal import rich_console
from plait.workloads import labels_with, load, refuse_engine
from plait.workloads.transformer.estimate import resolve_job

if TYPE_CHECKING:
    from plait.plan.plan import Plan
    from plait.simulate.pipeline import Timeline


def simulate_command(
    plan_file: PlanFileOption = None,
    model: ModelOption = None,
    cluster: ClusterOption = None,
    engine: EngineOption = None,
    trace: Annotated[Path | None, typer.Option(help="Write Chrome/Perfetto trace-event JSON here.")] = None,
    png: Annotated[Path | None, typer.Option(help="Write the timeline picture here.")] = None,
    force: ForceOption = False,
    as_json: JsonOption = False,
    gpus: Annotated[int | None, typer.Option("--gpus", help="GPUs; dp = gpus / (tp*pp*cp). [default: "
                                                            f"{DEFAULT_GPUS}; a GNN or DiT TOML: 1]")] = None,
    tp: TpOption = 1,
    pp: PpOption = 1,
    vpp: VppOption = 1,
    schedule: ScheduleOption = "1f1b",
    cp: CpOption = 1,
    cp_attention: CpAttentionOption = "ring",
    ep: EpOption = 1,
    dp_replicate: DpReplicateOption = None,
    sharding: ShardingOption = None,
    sp: SpOption = None,
    recompute: RecomputeOption = "none",
    recompute_layers: RecomputeLayersOption = -1,
    micro_batch: MicroBatchOption = None,
    global_batch: Annotated[int | None, typer.Option("--global-batch", help="Sequences per optimizer step (a GNN "
                                                     f"TOML: seed nodes). [default: {GLOBAL_BATCH}; a GNN TOML: "
                                                     "1024]")] = None,
    seq_len: SeqLenOption = 0,
    precision: PrecisionOption = "bf16",
    offload_optimizer: OffloadOptimizerOption = False,
    offload_params: OffloadParamsOption = False,
    swap_activations: SwapActivationsOption = False,
    swap_layers: SwapLayersOption = -1,
    dp_sync: DpSyncOption = None,
    parallel: ParallelOption = None,
    gnn_strategy: GnnStrategyOption = "sampled_dp",
) -> None:
    """Simulate one step rank by rank (pipeline schedule, transfers, gradient buckets) of a plan file or of the
    layout options as plait estimate takes them; a DiT's whole generation (PipeFusion patch by patch) or a GNN step,
    phase by phase."""
    options = dict(locals())
    refuse_layout_with_plan(simulate_command, options)
    check_suffix(png, ".png", "--png")
    workload = load(model)
    if workload.kind.simulate is not None:  # the kind simulates its own step
        refuse_engine(workload.kind, engine)
        workload.kind.simulate(workload, {**options, "gpus": gpus or 1, "global_batch": global_batch or 1024})
        return
    job = _job(options, "simulate")
    refuse_overwrite(trace, force)
    refuse_overwrite(png, force)
    timeline = simulate_step(job)
    _write_timeline(timeline, job.plan, trace, png, force)
    doc = _step_doc(timeline, job.plan)
    if as_json:
        print_json(doc)
        return
    _print_step(timeline, job.plan, doc, (trace, png))


def _write_timeline(timeline: Timeline, plan: Plan, trace: Path | None, png: Path | None, force: bool) -> None:
    """The step's trace-event JSON and timeline picture, where asked for."""
    if trace:
        write_trace(trace, timeline, overwrite=force)
    if png:
        from plait.report.plots import timeline_png

        timeline_png(timeline, png, f"one step: {plan.describe()}")


def _step_doc(timeline: Timeline, plan: Plan) -> dict[str, Any]:
    """The step's layout, time, ranks, span count and each rank's idle fraction (1 - compute busy / step)."""
    busy = {r: sum(s.end - s.start for s in timeline.spans if s.rank == r and s.stream == "compute")
            for r in {s.rank for s in timeline.spans}}
    return {"layout": plan.describe(), "step_time_s": timeline.step_time_s, "ranks": len(busy),
            "idle_fraction_per_rank": {r: 1 - b / timeline.step_time_s for r, b in sorted(busy.items())},
            "spans": len(timeline.spans)}


def _print_step(timeline: Timeline, plan: Plan, doc: dict[str, Any], written: tuple[Path | None, ...]) -> None:
    """The simulated step, each rank's idle share and the files written, as lines."""
    console = rich_console()
    console.print(f"simulated step: {timeline.step_time_s:.4g} s for {plan.describe()} ({len(timeline.spans)} spans)")
    for rank, idle in doc["idle_fraction_per_rank"].items():
        console.print(f"  rank {rank}: idle {100 * idle:.1f}% of the step")
    for path in written:
        if path:
            console.print(f"wrote {path}")


def report_command(
    plan_file: PlanFileOption = None,
    out: Annotated[Path, typer.Option(help="HTML file to write.")] = Path("report.html"),
    model: ModelOption = None,
    cluster: ClusterOption = None,
    engine: EngineOption = None,
    gpus_range: GpusRangeOption = None,
    tokens: TokensOption = 1e12,
    force: ForceOption = False,
    gpus: GpusOption = DEFAULT_GPUS,
    tp: TpOption = 1,
    pp: PpOption = 1,
    vpp: VppOption = 1,
    schedule: ScheduleOption = "1f1b",
    cp: CpOption = 1,
    cp_attention: CpAttentionOption = "ring",
    ep: EpOption = 1,
    dp_replicate: DpReplicateOption = None,
    sharding: ShardingOption = None,
    sp: SpOption = None,
    recompute: RecomputeOption = "none",
    recompute_layers: RecomputeLayersOption = -1,
    micro_batch: MicroBatchOption = None,
    global_batch: GlobalBatchOption = GLOBAL_BATCH,
    seq_len: SeqLenOption = 0,
    precision: PrecisionOption = "bf16",
    offload_optimizer: OffloadOptimizerOption = False,
    offload_params: OffloadParamsOption = False,
    swap_activations: SwapActivationsOption = False,
    swap_layers: SwapLayersOption = -1,
    dp_sync: DpSyncOption = None,
) -> None:
    """Write one self-contained HTML page: plan, breakdowns, timeline, memory per stage, Pareto front (of a plan
    file, or of the layout options as plait estimate takes them)."""
    from plait.report.html import render_report

    options = dict(locals())
    refuse_layout_with_plan(report_command, options)
    bounds = parse_gpu_range(gpus_range) if gpus_range else None
    job = _job(options, "report")
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
    rich_console().print(f"wrote {out} ({len(page) / 1024:.0f} KiB)")


def _job(options: dict[str, Any], command: str) -> Job:
    """The job of ``--plan`` (``--model``/``--cluster``/``--engine`` replacing the file's), or of the layout options
    as plait estimate reads them; a workload kind that is not one job of the core's layers (traced, DLRM, GNN, DiT)
    is refused here."""
    if options["plan_file"] is not None:
        return resolve_job(options["model"], options["cluster"], options["plan_file"], None, options["engine"])
    workload = load(options["model"])
    if workload.kind.job is None:
        also = f"; or a {labels_with('simulate')} TOML" if command == "simulate" else ""
        raise ConfigError(f"--model {options['model']!r}: plait {command} takes a catalog model, a config.json "
                          f"or a plan file (--plan){also}")
    return workload.kind.job(workload, {**options, "gpus": options["gpus"] or DEFAULT_GPUS,
                                        "global_batch": options["global_batch"] or GLOBAL_BATCH})
