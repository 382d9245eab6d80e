"""``plait simulate --model``: the timeline of a workload kind's step (a GNN step, a DiT's generation), printed with
the closed form's time that it checks, written as a trace and a picture."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from plait.errors import refuse_overwrite
from plait.hardware.catalog import DEFAULT_CLUSTER
from plait.simulate.pipeline import Timeline
from plait.simulate.trace import write_trace
from plait.strict_json import print_json
from plait.terminal import rich_console
from plait.workloads import Options, Workload

TimelineOf = Callable[[Workload, Options, str], tuple[Timeline, float, str]]
"""A kind's simulation: (workload, options, cluster) -> the timeline, the closed form's time, what was simulated."""


def simulate_workload(workload: Workload, options: Options, timeline_of: TimelineOf) -> None:
    """Simulate, then print the end time (and the closed form's, which it checks), writing trace and picture."""
    trace: Path | None = options["trace"]
    png: Path | None = options["png"]
    force, as_json = options["force"], options["as_json"]
    refuse_overwrite(trace, force)
    refuse_overwrite(png, force)
    timeline, predicted, what = timeline_of(workload, options, options["cluster"] or DEFAULT_CLUSTER)
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
    console = rich_console()
    console.print(f"simulated {what}: {timeline.step_time_s:.4g} s (closed form {predicted:.4g} s; "
                  f"{doc['spans']} spans on {doc['lanes']} lanes)")
    for path in (trace, png):
        if path:
            console.print(f"wrote {path}")
