"""``plait schedule``: simulate a trace of training jobs on a cluster under a scheduling policy (or all of them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.table import Table

from plait.cli.numbers import count, quantity
from plait.cli.options import DEFAULT_CLUSTER
from plait.cli.output import print_json
from plait.engine.catalog import DEFAULT_ENGINE, get_engine
from plait.errors import ConfigError, check_export_folder, refuse_overwrite
from plait.hardware.catalog import resolve_cluster
from plait.progress import LazyProgress
from plait.schedule.policies import POLICY_NAMES, make_policy
from plait.schedule.pool import Pool
from plait.schedule.result import ScheduleResult
from plait.schedule.simulate import simulate
from plait.schedule.speed import SpeedModel
from plait.schedule.synthetic import MAX_JOBS, MAX_SEED, synthetic_trace
from plait.schedule.trace import TraceJob, read_trace, trace_csv
from plait.schedule.trace_export import chrome_trace
from plait.terminal import rich_console, titled_table

if TYPE_CHECKING:
    from rich.console import Console

    from plait.hardware.cluster import Cluster
    from plait.schedule.simulate import Policy

DEFAULT_SCHEDULE_GPUS = 128
"""Cluster size simulated unless --gpus says otherwise (16 nodes of 8: the shipped traces offer it 1.5x its GPUs over
their arrival window)."""
HOUR_S = 3600.0


def _jobs(trace: Path | None, synthetic: str | None, jobs: int, seed: int, load: float, speed: SpeedModel,
          gpus: int) -> tuple[str, tuple[TraceJob, ...]]:
    if (trace is None) == (synthetic is None):
        raise ConfigError("give one of --trace PATH or --synthetic philly|helios|pai")
    if trace is not None:
        return str(trace), read_trace(trace)
    assert synthetic is not None
    return f"{synthetic} (seed {seed})", synthetic_trace(synthetic, jobs, seed, speed, gpus, load)


def _table(results: list[ScheduleResult]) -> Table:
    """Per policy: JCT, queueing, makespan (hours), both utilizations, preemptions; jobs done, rejected and
    deadlines missed in the caption where they are the same for every policy (they fit 80 columns)."""
    table = titled_table("plait schedule (hours)", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for col in ("policy", "JCT", "p50", "p99", "queue", "makespan", "util", "util*", "preempt"):
        table.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True,
                         min_width=11 if col == "policy" else max(len(col), 5))
    summaries = [r.summary() for r in results]
    for s in summaries:
        table.add_row(str(s["policy"]),
                      *(f"{float(s[k]) / HOUR_S:.2f}" for k in ("mean_jct_s", "median_jct_s", "p99_jct_s",
                                                                "mean_queue_s", "makespan_s")),
                      f"{float(s['utilization']):.3f}", f"{float(s['utilization_arrivals']):.3f}",
                      str(s["preemptions"]))
    counts = [f"{name} " + "/".join(str(s[key]) for s in summaries) for name, key in
              (("done", "done"), ("rejected", "rejected"), ("deadlines missed", "deadlines_missed"))]
    table.caption = ("JCT: mean; " + "; ".join(counts) + " (per policy, in row order); util: over the makespan, "
                     "util*: over the arrival window")
    return table


def _pairs_table(result: ScheduleResult, shown: int = 10) -> Table:
    """The first ``shown`` pairs a sharing policy made, with the cost model's predicted period and slowdowns."""
    pairs = result.pairs or ()
    table = titled_table(f"{result.policy}: {len(pairs)} pairs sharing GPUs (predicted)", box=box.SIMPLE_HEAD,
                         pad_edge=False, collapse_padding=True)
    for col in ("host", "guest", "GPUs", "c/s host", "c/s guest", "period", "slowdown", "gain", "bound"):
        table.add_column(col, justify="left" if col in ("host", "guest", "bound") else "right", no_wrap=True)
    for p in pairs[:shown]:
        table.add_row(p.host_id, p.guest_id, str(p.gpus), f"{p.host_compute_s:.2f}/{p.host_sync_s:.2f}",
                      f"{p.guest_compute_s:.2f}/{p.guest_sync_s:.2f}", f"{p.period_s:.2f}",
                      f"{p.host_slowdown:.2f}/{p.guest_slowdown:.2f}", f"{p.gain:.3f}", p.bound)
    table.caption = (f"seconds per step; slowdown host/guest; first {min(shown, len(pairs))} of {len(pairs)} "
                     "(all in --json)")
    return table


def schedule_command(
    trace: Annotated[Path | None, typer.Option(help="Trace CSV: job_id,arrival_s,model,gpus,tokens[,deadline_s].")] = None,
    synthetic: Annotated[str | None, typer.Option(help="Draw a trace instead: philly | helios | pai.")] = None,
    jobs: Annotated[int, count(f"With --synthetic: jobs to draw (at most {MAX_JOBS:,}: a bound on the work one command "
                               "may ask for).", high=MAX_JOBS)] = 300,
    seed: Annotated[int, count("With --synthetic: random seed.", low=0, high=MAX_SEED)] = 0,
    load: Annotated[float, quantity("With --synthetic: offered load over the arrival window (GPU-seconds held inside "
                                    "it if each job started on arrival / capacity).", high=10)] = 1.5,
    cluster: Annotated[str, typer.Option(help="Cluster preset or TOML/YAML file.")] = DEFAULT_CLUSTER,
    gpus: Annotated[int | None, typer.Option(help=f"GPUs of the cluster used [default: {DEFAULT_SCHEDULE_GPUS}, or "
                                                  "the preset's size if smaller].")] = None,
    policy: Annotated[str, typer.Option(help=f"{' | '.join(POLICY_NAMES)} | all.")] = "fifo",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    plot_dir: Annotated[Path | None, typer.Option(help="Write jct_cdf.png and utilization.png here.")] = None,
    trace_out: Annotated[Path | None, typer.Option(help="Write the cluster's schedule as Perfetto JSON.")] = None,
    write_trace: Annotated[Path | None, typer.Option(help="With --synthetic: write the drawn trace as CSV.")] = None,
    force: Annotated[bool, typer.Option(help="Replace existing output files.")] = False,
) -> None:
    """Simulate a trace of training jobs on a cluster: each job's speed at every size and placement comes from plait's
    planner; report completion times, queueing, makespan and utilization per policy."""
    names = list(POLICY_NAMES) if policy == "all" else [policy]
    policies = [make_policy(n) for n in names]
    _refuse_outputs(len(policies), synthetic, trace_out, write_trace, plot_dir, force)
    spec = resolve_cluster(cluster)
    size = gpus if gpus is not None else min(DEFAULT_SCHEDULE_GPUS, spec.max_gpus)
    Pool(spec, size)  # checks the size before any search
    speed = SpeedModel(spec, get_engine(DEFAULT_ENGINE))  # plans ranked for the default engine: no --engine here
    name, trace_jobs = _jobs(trace, synthetic, jobs, seed, load, speed, size)
    if write_trace is not None:
        write_trace.write_text(trace_csv(trace_jobs), encoding="utf-8")
    results = _simulate_policies(trace_jobs, spec, size, speed, policies, as_json)
    written = _write_outputs(results, trace_out, plot_dir)
    if as_json:
        paired = {r.policy: [p.as_dict() for p in r.pairs] for r in results if r.pairs is not None}
        print_json({"trace": name, "jobs": len(trace_jobs), "cluster": spec.name, "gpus": size,
                    "planner_searches": speed.searches, "policies": [r.summary() for r in results],
                    **({"pairs": paired} if paired else {})})
        return
    console = rich_console()
    console.print(f"{name}: {len(trace_jobs)} jobs on {size} GPUs of {spec.name}; speeds from "
                  f"{speed.searches} planner searches ({speed.search_s:.1f} s)")
    _print_results(console, results)
    for path in [p for p in (write_trace, trace_out) if p is not None] + written:
        console.print(f"wrote {path}")


def _refuse_outputs(num_policies: int, synthetic: str | None, trace_out: Path | None, write_trace: Path | None,
                    plot_dir: Path | None, force: bool) -> None:
    """Refuse output options that cannot be written (or would overwrite without --force) before any search."""
    if trace_out is not None and num_policies != 1:
        raise ConfigError("--trace-out writes one policy's schedule: give --policy NAME, not all")
    if write_trace is not None and synthetic is None:
        raise ConfigError("--write-trace writes a drawn trace: it needs --synthetic")
    for path in (trace_out, write_trace):
        refuse_overwrite(path, force)
    if plot_dir is not None:
        check_export_folder(plot_dir, ("jct_cdf.png", "utilization.png"), force)


def _simulate_policies(trace_jobs: tuple[TraceJob, ...], spec: Cluster, size: int, speed: SpeedModel,
                       policies: list[Policy], quiet: bool) -> list[ScheduleResult]:
    """Each policy's schedule of the trace on a fresh pool, under one progress bar over every policy's arrivals."""
    results = []
    with LazyProgress("simulating the schedule", quiet=quiet, unit="arrivals") as bar:
        for i, p in enumerate(policies):
            results.append(simulate(trace_jobs, Pool(spec, size), speed, p,
                                    lambda done, total, i=i: bar(i * total + done, len(policies) * total)))
    return results


def _write_outputs(results: list[ScheduleResult], trace_out: Path | None, plot_dir: Path | None) -> list[Path]:
    """The first policy's Perfetto JSON and the plots, where asked for; the plots' paths."""
    if trace_out is not None:
        trace_out.write_text(json.dumps(chrome_trace(results[0])), encoding="utf-8")
    written = []
    if plot_dir is not None:
        from plait.schedule.plots import write_plots

        written = write_plots(results, plot_dir)
    return written


def _print_results(console: Console, results: list[ScheduleResult]) -> None:
    """The policies' table, then each pairing policy's pairs (or why none formed)."""
    console.print(_table(results))
    for result in results:
        if result.pairs:
            console.print(_pairs_table(result))
        elif result.pairs is not None:
            console.print(f"{result.policy}: no pair formed (none that fits each GPU and gains enough)")
