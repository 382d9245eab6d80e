"""Predicted vs measured peak memory per GPU of public training runs (``plait validate --memory``).

The rows (``plait/validate/data/memory_runs.csv``, schema in ``plait/validate/data/README.md``) share the runs file's identity, shape
and layout columns; each row is predicted as a step-time row is (:func:`plait.validate.report.fill_row`: unknown
knobs take the feasible value with the best predicted step time), and the prediction is compared in the kind of
memory the source measured (``memory_kind``):

- the caching allocator's peak *reserved* bytes (``torch.cuda.max_memory_reserved``, torchtitan's ``memory:`` line):
  everything plait counts but the CUDA context, library workspaces and NCCL buffers (``runtime_reserved``), which
  live outside PyTorch's allocator;
- its peak *allocated* bytes (``torch.cuda.max_memory_allocated``, Megatron-LM's ``mem-max-allocated-bytes``): also
  without the allocator's fragmentation;
- a figure whose kind the source does not state: plait's whole figure (what the device shows).

A row without a global batch and without a pipeline is predicted at one micro-batch per replica: its peak holds
one micro-batch whatever the gradient accumulation.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, replace
from pathlib import Path

from plait.cost.estimate import MemoryBreakdown
from plait.errors import ConfigError, read_user_file
from plait.units import GIB
from plait.validate.progress import Progress, each
from plait.validate.records import positive
from plait.validate.report import Scored, fill_row
from plait.validate.runs import REQUIRED_COLUMNS, RunRow, parse_row

MEMORY_COLUMNS = ("id", "source", "peak_memory_gib", "memory_kind")
FILLED = {"moe_experts": "", "moe_top_k": "", "moe_ffn_hidden": "", "system": "", "step_time_s": "", "model_config": ""}
"""The runs file's columns a memory-runs file may leave out, and what they read as."""


@dataclass(frozen=True, kw_only=True)
class MemoryResult:
    """One row's outcome."""

    row: RunRow
    measured_gib: float
    kind: str
    """``reserved``, ``allocated`` or ``device`` (:func:`measured_kind`)."""
    predicted_gib: float | None = None
    reason: str = ""
    layout: str = ""

    @property
    def error_pct(self) -> float:
        assert self.predicted_gib is not None
        return 100.0 * (self.predicted_gib - self.measured_gib) / self.measured_gib


def measured_kind(memory_kind: str) -> str:
    """``reserved``, ``allocated`` or ``device`` from the row's description of its figure."""
    text = memory_kind.lower()
    if "reserved" in text:
        return "reserved"
    if "allocated" in text:
        return "allocated"
    return "device"


def comparable_bytes(memory: MemoryBreakdown, kind: str) -> float:
    """plait's figure in the kind the source measured (module docstring)."""
    if kind == "reserved":
        return memory.total_bytes - memory.runtime_reserved_bytes
    if kind == "allocated":
        return memory.total_bytes - memory.runtime_reserved_bytes - memory.fragmentation_bytes
    return memory.total_bytes


def read_memory_runs(path: Path) -> list[tuple[RunRow, float, str]]:
    """(row, measured GiB, kind) of every record of a memory-runs CSV."""
    reader = csv.DictReader(io.StringIO(read_user_file(path, "memory runs file"), newline=""))
    missing = [c for c in (*MEMORY_COLUMNS, *REQUIRED_COLUMNS) if c not in (*(reader.fieldnames or []), *FILLED)]
    if missing:
        raise ConfigError(f"memory runs file {str(path)!r} lacks column {missing[0]!r} (schema: plait/validate/data/README.md)")
    out = []
    for raw in reader:
        where = f"{path.name}:{reader.line_num}"
        row = parse_row({**FILLED, **{k: v for k, v in raw.items() if k is not None}}, where, path.parent)
        if row.global_batch is None and (row.pp or 1) == 1 and row.micro_batch and row.dp:
            # without a pipeline the peak holds one micro-batch whatever the accumulation: one per replica
            row = replace(row, global_batch=row.micro_batch * row.dp)
        measured = positive(raw["peak_memory_gib"] or "", "peak_memory_gib", where, integer=False)
        if measured is None:
            raise ConfigError(f"{where}: column peak_memory_gib is empty; it must be a positive number")
        out.append((row, measured, measured_kind(raw["memory_kind"])))
    return out


def predict_memory(row: RunRow, measured_gib: float, kind: str) -> MemoryResult:
    """Predict one row's peak memory (its plan filled as a step-time row's)."""
    result = fill_row(row)
    if result.estimate is None:
        return MemoryResult(row=row, measured_gib=measured_gib, kind=kind, reason=result.reason)
    predicted = comparable_bytes(result.estimate.memory, kind) / GIB
    return MemoryResult(row=row, measured_gib=measured_gib, kind=kind, predicted_gib=predicted,
                        layout=result.estimate.plan.describe())


@dataclass(frozen=True, kw_only=True)
class MemoryValidation(Scored):
    """Every row's outcome and the mean absolute percentage error."""

    results: list[MemoryResult]

    @property
    def predicted(self) -> list[MemoryResult]:
        """Rows with a prediction and a measurement."""
        return [r for r in self.results if r.predicted_gib is not None]

    def to_dict(self) -> dict[str, object]:
        """The JSON document of ``plait validate --memory ... --json``."""
        return {
            "memory_mape_pct": self.mape_pct, "rows": len(self.predicted), "rows_in_file": len(self.results),
            "per_source": self.per_source(),
            "results": [{"id": r.row.id, "source": r.row.source, "kind": r.kind, "measured_gib": r.measured_gib,
                         "predicted_gib": r.predicted_gib, "error_pct": r.error_pct, "layout": r.layout}
                        for r in self.predicted],
            "not_predicted": [{"id": r.row.id, "reason": r.reason} for r in self.results if r.predicted_gib is None],
        }


def validate_memory(path: Path, progress: Progress | None = None) -> MemoryValidation:
    """Predict every row of a memory-runs CSV (``progress``: hears the rows predicted)."""
    return MemoryValidation(results=each(read_memory_runs(path), lambda entry: predict_memory(*entry), progress))
