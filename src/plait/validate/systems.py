"""The GPU and precision names of the shipped CSVs of NVIDIA DeepLearningExamples' tables (``classic_dp.csv``,
``dlrm_steps.csv``) and what plait runs them as: the preset of the system a GPU name stands for, or, for a GPU
named without its system, a generic server of that GPU (:mod:`plait.hardware.server`)."""

from __future__ import annotations

import functools
from dataclasses import replace

from plait.hardware.catalog import get_accelerator, get_cluster
from plait.hardware.cluster import Cluster
from plait.hardware.server import accelerator_slug, gpu_server, server_problem
from plait.validate.records import Record

SYSTEMS = {"A100-SXM4-80GB": "dgx-a100-ib", "A100-SXM4-40GB": "dgx-a100-40gb", "V100-SXM2-16GB": "dgx1-v100",
           "V100-SXM2-32GB": "dgx1-v100", "V100-SXM3-32GB": "dgx2-v100", "V100-SXM3-32GB-H": "dgx2-v100",
           "P100": "dgx1-p100", "K80": "aws-p2-8xlarge"}
"""GPU names of the CSV -> the preset of the system the source names (DGX A100, DGX-1 V100 and P100, DGX-2/2H,
EC2 p2.8xlarge)."""
PRECISIONS = {"amp": "fp16", "tf32": "tf32", "fp32": "fp32", "bf16": "bf16"}
"""The CSV's precision -> plan precision (NVIDIA's AMP: fp16 GEMMs; TF32: fp32 storage, TF32 tensor-core GEMMs;
FP32: fp32 throughout; BF16: bf16 autocast)."""
AMP_NAMES = ("fp16", "mixed", "amp_fp16", "mixed precision", "amp (fp16)")
"""Other tables' names of NVIDIA's fp16 automatic mixed precision, read as ``amp``."""


def with_precision_named(row: Record) -> Record:
    """``row`` with its precision as :data:`PRECISIONS` names it: lower case, and fp16 mixed precision written
    otherwise (:data:`AMP_NAMES`) as ``amp``."""
    cell = row["precision"].strip().lower()
    cell = "amp" if cell in AMP_NAMES else cell
    return row if cell == row["precision"] else replace(row, cells={**row.cells, "precision": cell})


def unpredicted(row: Record, units: tuple[str, ...]) -> str | None:
    """Why a row of these tables is not predicted: its measured unit is not one of ``units``, its GPU has neither a
    preset system (:data:`SYSTEMS`) nor a generic server (:func:`plait.hardware.server.server_problem`), or its
    precision is not one of :data:`PRECISIONS`; ``None`` when all three are known."""
    if row["measured_unit"] not in units:
        return f"unit {row['measured_unit']!r} is not one of {', '.join(units)}"
    if system_of(row["gpu"]) is None and (problem := server_problem(row["gpu"], row.count("gpus"))):
        return problem
    if row["precision"] not in PRECISIONS:
        return f"precision {row['precision']!r} is not one of {', '.join(PRECISIONS)}"
    return None


@functools.cache
def system_of(gpu: str) -> str | None:
    """The preset system a row's GPU stands for: :data:`SYSTEMS`' own, else the one system of them that carries the
    part the name means however it is written (``Tesla P100``: dgx1-p100; assumed: the source's own system, as the
    tables of its kind name it), ``None`` where none or several do (a V100: the DGX-1 and the DGX-2). Kept per name:
    the unpredicted check, the cluster and the label of a row each ask, and the presets it compares do not change."""
    if gpu in SYSTEMS:
        return SYSTEMS[gpu]
    slug = accelerator_slug(gpu)
    carrying = {system for system in SYSTEMS.values() if slug is not None and get_cluster(system).accelerator.name
                == get_accelerator(slug).name}
    return carrying.pop() if len(carrying) == 1 else None


def row_cluster(gpu: str, gpus: int) -> Cluster:
    """The cluster ``gpus`` GPUs named ``gpu`` ran on: the preset of the system the name stands for
    (:func:`system_of`), else a generic server of that GPU (:func:`plait.hardware.server.gpu_server`)."""
    system = system_of(gpu)
    return get_cluster(system) if system is not None else gpu_server(gpu, gpus)


def gpu_label(gpu: str, systems: dict[str, str] | None = None) -> str:
    """A row's GPU as its label shows it: the name, and where no preset system stands for it (:data:`SYSTEMS`, or
    ``systems``), the system it ran on as assumed (:func:`system_of`) or that it ran as a generic server."""
    if gpu in (SYSTEMS if systems is None else systems):
        return gpu
    system = system_of(gpu) if systems is None else None
    return f"{gpu} (as {system})" if system is not None else f"{gpu} (generic server)"
