"""``plait simulate --model GNN.toml|DIT.toml``: the timeline of a GNN step or of a DiT's generation."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from plait.cli.output import print_json
from plait.errors import refuse_overwrite
from plait.predict.dit import is_dit_file
from plait.predict.gnn import is_gnn_file
from plait.simulate.pipeline import Timeline
from plait.simulate.trace import write_trace

DEFAULT_CLUSTER = "dgx-h100-ib"


def is_workload_file(name: str | None) -> bool:
    return is_gnn_file(name) or is_dit_file(name)


def simulate_workload(model: str, cluster: str | None, gpus: int, global_batch: int, parallel: str | None,
                      gnn_strategy: str, trace: Path | None, png: Path | None, force: bool, as_json: bool) -> None:
    """Simulate, then print the end time (and the closed form's, which it checks), writing trace and picture."""
    refuse_overwrite(trace, force)
    refuse_overwrite(png, force)
    timeline, predicted, what = _timeline(model, cluster or DEFAULT_CLUSTER, gpus, global_batch, parallel,
                                          gnn_strategy)
    if trace:
        write_trace(trace, timeline, overwrite=force)
    if png:
        from plait.report.plots import timeline_png

        timeline_png(timeline, png, what)
    doc = {"simulated": what, "simulated_s": timeline.step_time_s, "closed_form_s": predicted,
           "lanes": len({s.rank for s in timeline.spans}), "spans": len(timeline.spans)}
    if as_json:
        print_json(doc)
        return
    console = Console()
    console.print(f"simulated {what}: {timeline.step_time_s:.4g} s (closed form {predicted:.4g} s; "
                  f"{doc['spans']} spans on {doc['lanes']} lanes)")
    for path in (trace, png):
        if path:
            console.print(f"wrote {path}")


def _timeline(model: str, cluster: str, gpus: int, global_batch: int, parallel: str | None,
              gnn_strategy: str) -> tuple[Timeline, float, str]:
    from plait.simulate.workloads import dit_timeline, gnn_timeline

    if is_dit_file(model):
        from plait.predict.dit import parse_dit_plan, predict_dit

        dit = predict_dit(model, cluster, parse_dit_plan(parallel or f"ulysses={gpus}"))
        timeline = dit_timeline(dit.job, dit.plan, dit.estimate)
        return timeline, dit.estimate.latency_s, f"generation of {dit.spec.name} ({dit.plan.label()})"
    from plait.predict.gnn import predict_gnn

    gnn = predict_gnn(model, cluster, gpus, global_batch, gnn_strategy)
    return gnn_timeline(gnn.estimate, gpus), gnn.estimate.step_s, f"step of {gnn.spec.name} ({gnn_strategy})"
