"""Predicted vs measured training throughput of recommendation models: public tables of NVIDIA's
DeepLearningExamples DLRM (``plait/validate/data/dlrm_steps.csv``; every source, commit and caveat in
``plait/validate/data/dlrm_steps.md``), each costed with the shipped model file its row names, on the preset of its
system, as the example runs it (:mod:`plait.workloads.dlrm.hybrid`: bottom MLP on rank 0, tables whole on the other
ranks, top part data-parallel).

The error is on the step time (predicted over measured, minus one): a row's measured records per second over its
global batch. Rows plait cannot predict say why.
"""

from __future__ import annotations

from pathlib import Path

from plait.validate.classic import ClassicResult
from plait.validate.datasets import dataset_path, model_path
from plait.validate.progress import Progress, each
from plait.validate.records import Record, read_records
from plait.validate.systems import PRECISIONS, gpu_label, row_cluster, unpredicted, with_precision_named
from plait.workloads.dlrm.hybrid import hybrid_step
from plait.workloads.dlrm.model import read_dlrm

COLUMNS = ("source_id", "model", "gpu", "gpus", "precision", "global_batch", "parallel", "measured_value",
           "measured_unit", "notes")
"""The columns a row's prediction reads (``plait/validate/data/dlrm_steps.md``)."""
UNITS = ("records_per_s",)
GRAD_SCALER = {"DLE_PYT_DLRM_2110"}
"""Sources whose mixed-precision loop scales the loss with ``torch.cuda.amp.GradScaler``, which unscales the
embeddings' sparse gradients and reads its overflow flag every step (:mod:`plait.workloads.dlrm.hybrid`): the 21.10
release's ``main.py`` @4154bda6 (``scaler = torch.cuda.amp.GradScaler(enabled=FLAGS.amp, ...)``, ``weight_update``).
The 21.02 and 21.04 releases (@4e764dcd, @15af494a) scale by a constant folded into the learning rate."""
PARALLEL = ("single", "dle_hybrid")
"""How a row's tables and MLPs are spread: all on one GPU, or DeepLearningExamples' hybrid parallelism
(:mod:`.hybrid`; on one GPU it is the single case)."""


def predict_row(row: Record, csv: Path | None = None) -> ClassicResult:
    """The prediction of one CSV row (module docstring) of the file ``csv`` (its model file is looked for beside it
    first, :func:`plait.validate.datasets.model_path`; ``None``: the shipped CSV)."""
    row = with_precision_named(row)
    label = f"{row['model']} {gpu_label(row['gpu'])} x{row['gpus']} {row['precision']} gb{row['global_batch']}"
    measured = row.number("measured_value")
    result = lambda why: ClassicResult(row["source_id"], label, measured, None, why)
    why = unpredicted(row, UNITS)
    if why is not None:
        return result(why)
    if row["parallel"] not in PARALLEL:
        return result(f"parallelism {row['parallel']!r} is not one of {', '.join(PARALLEL)}")
    gpus, batch = row.count("gpus"), row.count("global_batch")
    if batch % gpus:
        return result(f"global batch {batch} is not a multiple of {gpus} GPUs")
    model = model_path(csv or dataset_path("dlrm"), row["model"])
    if model is None:
        return result(f"model file {row['model']!r} is neither beside the CSV nor shipped")
    spec = read_dlrm(model)
    step = hybrid_step(spec, row_cluster(row["gpu"], gpus), gpus, batch, PRECISIONS[row["precision"]],
                       grad_scaler=row["source_id"] in GRAD_SCALER)
    return ClassicResult(row["source_id"], label, measured, batch / step.step_s)


def validate_dlrm(path: Path, progress: Progress | None = None) -> list[ClassicResult]:
    """Every row of ``path`` (the schema of ``plait/validate/data/dlrm_steps.csv``)."""
    return each(read_records(path, "--dlrm file", COLUMNS), lambda row: predict_row(row, path), progress)
