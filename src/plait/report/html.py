"""One self-contained HTML page: the plan, its breakdowns and the plots (images inlined as data URIs)."""

from __future__ import annotations

import base64
import html
import tempfile
from pathlib import Path

from plait.cost.estimate import Estimate
from plait.report.plots import memory_png, pareto_png, timeline_png
from plait.search.pareto import Point
from plait.simulate.pipeline import Timeline
from plait.units import GIB

STYLE = """body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:.5rem 0 1.5rem}td,th{border:1px solid #ccc;padding:.25rem .6rem;text-align:right}
th:first-child,td:first-child{text-align:left}img{max-width:100%;border:1px solid #eee}h1{font-size:1.5rem}
.note{color:#666;font-size:.9rem}"""


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}">'


def _table(rows: list[tuple[str, str]], header: tuple[str, str]) -> str:
    body = "".join(f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td></tr>" for a, b in rows)
    return f"<table><tr><th>{html.escape(header[0])}</th><th>{html.escape(header[1])}</th></tr>{body}</table>"


def render_report(est: Estimate, timeline: Timeline, stage_memory: list[dict[str, float]],
                  points: list[Point] | None = None, front: list[Point] | None = None) -> str:
    """The page as a string."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        timeline_png(timeline, folder / "timeline.png", f"one step: {est.plan.describe()}")
        memory_png(stage_memory, est.memory.capacity_bytes, folder / "memory.png", "memory per GPU by pipeline stage")
        pictures = [("Step timeline (simulated)", _img(folder / "timeline.png")),
                    ("Memory per pipeline stage", _img(folder / "memory.png"))]
        if points:
            pareto_png(points, front or [], folder / "pareto.png", "time and money to train")
            pictures.append(("GPUs x days x dollars", _img(folder / "pareto.png")))
    summary = [("model", est.model_name), ("cluster", est.cluster_name), ("GPUs", str(est.num_gpus)),
               ("layout", est.plan.describe()), ("step time", f"{est.step_time_s:.4g} s"),
               ("tokens/s", f"{est.tokens_per_s:,.0f}"), ("MFU", f"{100 * est.mfu:.1f}%"),
               ("memory", f"{est.memory.total_bytes / GIB:.1f} of {est.memory.capacity_bytes / GIB:.0f} GiB"
                          + ("" if est.memory.fits else " (does not fit)"))]
    time_rows = [(name, f"{value:.4g} s ({100 * value / est.step_time_s:.1f}%)") for name, value in est.time.items()
                 if value > 0]
    memory_rows = [(name, f"{value / GIB:.2f} GiB") for name, value in est.memory.items()]
    sections = "".join(f"<h2>{html.escape(title)}</h2>{img}" for title, img in pictures)
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>plait report: "
            f"{html.escape(est.model_name)}</title><style>{STYLE}</style></head><body>"
            f"<h1>plait report: {html.escape(est.model_name)} on {est.num_gpus} GPUs</h1>"
            f"{_table(summary, ('', ''))}<h2>Step time</h2>{_table(time_rows, ('component', 'seconds'))}"
            f"<h2>Memory per GPU (stage {est.memory.stage})</h2>{_table(memory_rows, ('component', 'GiB'))}"
            f"{sections}<p class='note'>Predicted by plait; MFU in the PaLM FLOP convention against the "
            f"{html.escape(est.plan.precision)} dense peak.</p></body></html>")
