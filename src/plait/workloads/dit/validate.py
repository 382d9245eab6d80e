"""Predicted vs measured latency of parallel diffusion-transformer inference: public tables of xDiT and
ParaAttention (``plait/validate/data/dit_latency.csv``; every source, commit and caveat in ``plait/validate/data/dit_latency.md``),
each costed by :mod:`plait.workloads.dit.cost` with the shipped model file its model names, on the preset of its GPU.

The error is on the latency (predicted over measured, minus one). The measured figures time the whole pipeline
call (text encoder and VAE decoder included, which plait leaves out); rows run with and without torch.compile, which
plait does not tell apart, so the two are reported side by side. Rows plait cannot predict say why: video and
linear-attention models it does not describe, GPUs without a preset, rows that state no resolution.
"""

from __future__ import annotations

from pathlib import Path

from plait.hardware.catalog import get_cluster
from plait.validate.classic import ClassicResult
from plait.validate.datasets import dataset_path
from plait.validate.progress import Progress, each
from plait.validate.records import Record, read_records
from plait.workloads.dit.cost import DitPlan, estimate_dit
from plait.workloads.dit.model import check_dit, read_dit

MODELS = {"FLUX.1-dev": "flux-1-dev-1024px.toml"}
"""Model names of the CSV -> the model file shipped beside the CSV in ``plait/validate/data/models`` (package data,
the same file as ``examples/``; its job's resolution and steps are the row's)."""
SYSTEMS = {"H100": "dgx-h100-ib", "A100-SXM4-80GB": "dgx-a100-ib", "A100": "dgx-a100-ib"}
"""GPU names of the CSV -> a preset of that GPU (the rows run inside one NVLink node)."""


COLUMNS = ("source_id", "model", "resolution", "steps", "batch", "gpu", "gpus", "parallel", "measured_latency_s",
           "notes")
"""The columns a row's prediction reads (the parallel degrees may follow; ``plait/validate/data/dit_latency.md``)."""


def _degree(row: Record, key: str) -> int:
    return row.count(key, default=1)


def predict_row(row: Record) -> ClassicResult:
    """The prediction of one CSV row (module docstring)."""
    from dataclasses import replace


    compiled = row["notes"].split(";")[0].strip()
    label = f"{row['model']} {row['resolution'] or '?'} {row['gpu']} x{row['gpus']} {row['parallel']} ({compiled})"
    measured = 1.0 / row.number("measured_latency_s")  # latencies as rates: the error is on the latency
    result = lambda why: ClassicResult(row["source_id"], label, measured, None, why)
    if row["model"] not in MODELS:
        return result(f"model {row['model']!r} is not described (video and linear-attention DiTs are not modelled)")
    if row["gpu"] not in SYSTEMS:
        return result(f"no preset system of {row['gpu']} GPUs")
    if not row["resolution"]:
        return result("the source states no resolution")
    spec, job = read_dit(dataset_path("dit").parent / "models" / MODELS[row["model"]])
    sides = row.counts("resolution", "x")
    if len(sides) != 2 or sides[0] != sides[1]:
        return result(f"resolution {row['resolution']}: plait's DiT jobs are square (WIDTHxHEIGHT, the two equal)")
    width = sides[0]
    job = replace(job, resolution=width, steps=row.count("steps"), batch=row.count("batch", default=1))
    check_dit(spec, job, row.where)
    plan = DitPlan(cfg=_degree(row, "cfg"), ulysses=_degree(row, "ulysses"), ring=_degree(row, "ring"),
                   pipefusion=_degree(row, "pipefusion"), tp=_degree(row, "tp"))
    if plan.pipefusion > 1:
        plan = replace(plan, patches=_degree(row, "patches") if row.get("patches") else plan.pipefusion)
    if plan.gpus != row.count("gpus"):
        return result(f"the degrees multiply to {plan.gpus}, not the row's {row['gpus']} GPUs")
    est = estimate_dit(spec, job, plan, get_cluster(SYSTEMS[row["gpu"]]))
    return ClassicResult(row["source_id"], label, measured, 1.0 / est.latency_s)


def validate_dit(path: Path, progress: Progress | None = None) -> list[ClassicResult]:
    """Every row of ``path`` (the schema of ``plait/validate/data/dit_latency.csv``)."""
    return each(read_records(path, "--dit file", COLUMNS), predict_row, progress)
