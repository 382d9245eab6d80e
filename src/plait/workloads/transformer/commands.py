"""The transformer kind's ``plait plan``: the core's search ranked, explained, printed and exported."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from plait.engine.engine import Engine
from plait.errors import check_export_folder
from plait.export.artifact import write_artifacts
from plait.export.bundle import export_for, export_names
from plait.job import Job
from plait.plan.plan import Plan
from plait.progress import LazyProgress
from plait.search.request import Checked, CountPlans, PlanRequest, ThroughputPlans, plan_search
from plait.strict_json import print_json
from plait.terminal import rich_console
from plait.workloads import Options, Workload
from plait.workloads.transformer.render import (
    per_stage_json,
    print_per_stage,
    print_points,
    print_relaxations,
    print_search,
    search_json,
)


def plan(workload: Workload, options: Options) -> None:
    """``plait plan``: the declared space searched (:func:`plait.search.request.plan_search`), ranked, explained and
    printed; the winner exported where asked."""
    model, export, force, as_json, dp_sync = (options[k] for k in ("model", "export", "force", "as_json", "dp_sync"))
    request = PlanRequest(model=model, cluster=options["cluster"], engine=options["engine"], gpus=options["gpus"],
                          gpus_range=options["gpus_range"], global_batch=options["global_batch"],
                          seq_len=options["seq_len"], objective=options["objective"], tokens=options["tokens"],
                          deadline_days=options["deadline_days"], budget_usd=options["budget_usd"], top=options["top"],
                          memory_margin=options["memory_margin"],
                          allow_tp_across_nodes=options["allow_tp_across_nodes"], precision=options["precision"],
                          dp_sync=tuple(dp_sync) if dp_sync is not None else None, export=export,
                          workers=options["workers"], rank_by=options["rank_by"], tp_grids=options["tp_grids"])
    console = rich_console(stderr=as_json)
    plans = plan_search(request, lambda label: LazyProgress(label, quiet=as_json),
                        lambda engine: _check_export(export, model, engine, force))
    if isinstance(plans, ThroughputPlans):
        _show_throughput(plans, console, as_json, force)
    else:
        _show_counts(plans, console, as_json, force)


def _show_throughput(plans: ThroughputPlans, console: Console, as_json: bool, force: bool) -> None:
    """The ranked plans (or the relaxations where none fits), the export, and exit code 1 where none fits."""
    result, best, fixes = plans.result, plans.best, plans.fixes
    if as_json:
        print_json({**search_json(result, best, fixes), "per_stage": per_stage_json(plans.per_stage, best, plans.per_stage_cpu_s),
                    "warnings": list(plans.checked.notes)})
    else:
        print_search(console, result, plans.checked.request.top)
        if best:
            print_per_stage(console, plans.per_stage, best[0], plans.per_stage_cpu_s)
        if not best:
            print_relaxations(console, result, fixes)
        _print_notes(console, plans.checked.notes)
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
                        "energy_j": p.energy_j, "tokens_per_s": p.estimate.tokens_per_s} for p in points],
            "pareto_gpus": [p.gpus for p in front],
            "choice": {"gpus": choice.gpus, "plan": choice.estimate.plan.to_dict(), "days": choice.days,
                       "dollars": choice.dollars, "energy_j": choice.energy_j},
            "warnings": list(plans.checked.notes),
        })
    else:
        print_points(console, points, front, choice, request.tokens)
        _print_notes(console, plans.checked.notes)
    if request.export:
        written = _export(plans.checked, choice.estimate.plan, force)
        console.print(f"exported {', '.join(str(p) for p in written)}")


def _print_notes(console: Console, notes: tuple[str, ...]) -> None:
    """What the search assumed for every plan, once, as ``plait estimate`` says its warnings."""
    for note in notes:
        console.print(f"[yellow]warning[/]: {escape(note)}")


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
