"""``plait plan --model DIT.toml``: every way to spend the GPUs on a diffusion transformer, lowest latency first;
``--export DIR`` writes the fastest plan xDiT runs for the model as its launch line
(:func:`plait.workloads.dit.xdit.launch_line`)."""

from __future__ import annotations

import json
from pathlib import Path

from plait.errors import ConfigError, check_export_folder
from plait.hardware.catalog import resolve_cluster
from plait.strict_json import print_json
from plait.terminal import rich_console
from plait.workloads import Workload
from plait.workloads.dit.cost import DitPlan
from plait.workloads.dit.predict import DitPrediction, search_dit
from plait.workloads.dit.render import print_dit, print_dit_search
from plait.workloads.dit.xdit import launch_line, unsupported

EXPORTS = ("xdit_launch.txt", "dit_plan.json")


def plan_dit(workload: Workload, cluster: str, gpus: int, memory_margin: float, as_json: bool,
             export: Path | None = None, force: bool = False) -> None:
    spec, job = workload.description
    if export is not None:
        check_export_folder(export, EXPORTS, force)
        unsupported(spec, DitPlan())  # a model xDiT does not run is refused before the search
    ranked, refused = search_dit(spec, job, resolve_cluster(cluster), gpus, memory_margin)
    exported = _export(ranked, export) if export is not None else None
    if as_json:
        print_json({"ranked": [r.to_dict() for r in ranked],
                    "refused": [{"plan": plan.label(), "why": why} for plan, why in refused],
                    "exported": exported.plan.label() if exported else None})
        return
    console = rich_console()
    if ranked:
        print_dit(console, ranked[0])
    print_dit_search(console, ranked, refused)
    if exported is not None and export is not None:
        console.print(f"wrote {', '.join(str(export / n) for n in EXPORTS)} for {exported.plan.label()}"
                      + ("" if exported is ranked[0] else " (the fastest plan xDiT runs)"))


def _export(ranked: list[DitPrediction], folder: Path) -> DitPrediction:
    runnable = [r for r in ranked if not unsupported(r.spec, r.plan)]
    if not runnable:
        raise ConfigError("no plan that fits is one xDiT runs for this model: nothing to export")
    best = runnable[0]
    line = launch_line(best.spec, best.job, best.plan)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "xdit_launch.txt").write_text(line + "\n")
    (folder / "dit_plan.json").write_text(json.dumps(best.to_dict(), indent=1) + "\n")
    return best
