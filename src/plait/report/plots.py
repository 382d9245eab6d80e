"""PNG plots with matplotlib (Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from plait.search.pareto import Point  # noqa: E402
from plait.simulate.pipeline import Timeline  # noqa: E402
from plait.units import GIB

COLOURS = {"F": "#4C78A8", "B": "#F58518", "W": "#54A24B", "optimizer": "#9D9D9D", "dp-reduce": "#B279A2",
           "param-gather": "#E45756", "denoise": "#4C78A8", "exposed comm": "#E45756", "sampling": "#72B7B2",
           "feature fetch": "#E45756", "forward+backward": "#F58518", "gradient all-reduce": "#B279A2"}
LABELS = {"F": "forward", "B": "backward", "W": "weight grad", "optimizer": "optimizer", "dp-reduce": "grad reduce",
          "param-gather": "param all-gather", "denoise": "denoising (per patch)", "exposed comm": "exposed comm",
          "sampling": "sampling", "feature fetch": "feature fetch", "forward+backward": "forward+backward",
          "gradient all-reduce": "gradient all-reduce"}


def timeline_png(timeline: Timeline, path: Path, title: str) -> None:
    """Ranks x time, compute and communication lanes, coloured by kind."""
    ranks = sorted({s.rank for s in timeline.spans})
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(ranks) + 1.6), dpi=110)
    # every span in one collection, drawn in span order: an artist per span took 2.4-2.9 s of CPU for the 1,368
    # spans of examples/llama3-70b-pp.toml, one collection 0.15-0.2 s, the same pixels (measured by
    # time.process_time around this function in `plait simulate --plan examples/llama3-70b-pp.toml --png t.png`)
    boxes: list[list[tuple[float, float]]] = []
    colours: list[str] = []
    for span in timeline.spans:
        bottom = span.rank - 0.3 + (0.36 if span.stream == "comm" else 0.0)
        top = bottom + (0.3 if span.stream == "comm" else 0.6)
        boxes.append([(span.start, bottom), (span.start, top), (span.end, top), (span.end, bottom)])
        colours.append(COLOURS.get(span.kind, "#333333"))
    if boxes:
        ax.add_collection(PolyCollection(boxes, facecolors=colours, linewidth=0))
        ax.autoscale_view()  # matplotlib before 3.11 leaves the view to the caller after add_collection
    ax.set_yticks(ranks, [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    ax.set_title(title, fontsize=10)
    kinds = [k for k in COLOURS if any(s.kind == k for s in timeline.spans)]
    if kinds:
        ax.legend(handles=[Patch(color=COLOURS[k], label=LABELS[k]) for k in kinds], loc="upper center",
                  bbox_to_anchor=(0.5, -0.18 - 0.2 / max(len(ranks), 1)), ncol=len(kinds), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def memory_png(stages: list[dict[str, float]], capacity_bytes: float, path: Path, title: str) -> None:
    """Stacked memory components per pipeline stage against the GPU's capacity."""
    names = ["weights", "gradients", "optimizer", "activations", "comm_buffers", "runtime_reserved", "fragmentation"]
    fig, ax = plt.subplots(figsize=(max(5.0, 0.5 * len(stages) + 3), 3.8), dpi=110)
    bottoms = [0.0] * len(stages)
    colours = plt.get_cmap("tab10").colors
    for i, name in enumerate(names):
        values = [s[name] / GIB for s in stages]
        ax.bar(range(len(stages)), values, bottom=bottoms, color=colours[i % 10], label=name.replace("_", " "))
        bottoms = [b + v for b, v in zip(bottoms, values)]
    ax.axhline(capacity_bytes / GIB, color="black", linestyle="--", linewidth=1, label="capacity")
    ax.set_xlabel("pipeline stage")
    ax.set_ylabel("GiB per GPU")
    ax.set_xticks(range(len(stages)))
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def pareto_png(points: list[Point], front: list[Point], path: Path, title: str) -> None:
    """Days to train against GPUs, cost as colour; the Pareto front joined."""
    fig, ax = plt.subplots(figsize=(6.5, 4.0), dpi=110)
    scatter = ax.scatter([p.gpus for p in points], [p.days for p in points], c=[p.dollars / 1e6 for p in points],
                         cmap="viridis", s=40, zorder=3)
    ax.plot([p.gpus for p in front], [p.days for p in front], color="#E45756", linewidth=1.2, zorder=2,
            label="Pareto front (GPUs, days, dollars)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("GPUs")
    ax.set_ylabel("days to train")
    fig.colorbar(scatter, ax=ax, label="cost (million USD)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
