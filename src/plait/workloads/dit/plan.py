"""``plait plan --model DIT.toml``: every way to spend the GPUs on a diffusion transformer, lowest latency first;
``--export DIR`` writes the fastest plan xDiT runs as its launch line."""

from __future__ import annotations

import json
from pathlib import Path

from plait.errors import ConfigError, check_export_folder
from plait.hardware.catalog import resolve_cluster
from plait.strict_json import print_json
from plait.terminal import rich_console
from plait.workloads import Workload
from plait.workloads.dit.predict import DitPrediction, search_dit
from plait.workloads.dit.render import print_dit, print_dit_search
from plait.workloads.dit.xdit import torchrun_line

EXPORTS = ("xdit_launch.txt", "dit_plan.json")
SCRIPTS = {"mmdit": "examples/flux_example.py", "pixart": "examples/pixartalpha_example.py"}
"""xDiT's example script per block family (xdit-project/xDiT examples/); a plain DiT has none."""


def plan_dit(workload: Workload, cluster: str, gpus: int, memory_margin: float, as_json: bool,
             export: Path | None = None, force: bool = False) -> None:
    if export is not None:
        check_export_folder(export, EXPORTS, force)
    spec, job = workload.description
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
    runnable = [r for r in ranked if r.plan.distrifusion == 1]
    if not runnable:
        raise ConfigError("no plan that fits is one xDiT runs (only DistriFusion plans fit): nothing to export")
    best = runnable[0]
    script = SCRIPTS.get(best.spec.kind, "<xDiT example script for this model>")
    line = torchrun_line(best.spec, best.job, best.plan, best.spec.hf_model or "<model id>", script)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "xdit_launch.txt").write_text(line + "\n")
    (folder / "dit_plan.json").write_text(json.dumps(best.to_dict(), indent=1) + "\n")
    return best
