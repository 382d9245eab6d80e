"""Predict every measured run and score the predictions (mean absolute percentage error)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import mean
from typing import Any

import numpy as np

from plait.cost.batch import evaluate_batch
from plait.cost.estimate import Estimate
from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.job import Job
from plait.plan.columns import PlanColumns
from plait.plan.rules import broken_rule_index
from plait.predict.estimate import assemble
from plait.predict.intervals import NOMINAL, loso_coverage, spread
from plait.validate.progress import Progress, each
from plait.validate.runs import RunRow
from plait.validate.translate import candidate_plans, row_cluster, row_model


@dataclass(frozen=True, kw_only=True)
class RowResult:
    """Outcome of one row."""

    row: RunRow
    estimate: Estimate | None = None
    """Best-predicted feasible plan's estimate (``None`` when the row could not be predicted)."""
    reason: str = ""
    """Why the row was not predicted."""
    candidates: int = 0
    """Plans consistent with the row."""
    fits: bool = True
    """Whether the chosen plan fits in memory (``False``: none did; the fastest was kept)."""

    @property
    def error_pct(self) -> float:
        """Signed error of the prediction, percent of the measured time."""
        assert self.estimate and self.row.step_time_s
        return 100.0 * (self.estimate.step_time_s - self.row.step_time_s) / self.row.step_time_s


def predict_row(row: RunRow, cluster_of: Callable[[RunRow], Cluster] = row_cluster) -> RowResult:
    """Fill the row's unknown knobs by the best-predicted feasible rule and estimate it (``cluster_of``: the cluster
    a row runs on, the row's own unless a what-if says otherwise)."""
    if row.step_time_s is None:
        return RowResult(row=row, reason="no measured step time (source gives no convertible figure)")
    return fill_row(row, cluster_of)


def fill_row(row: RunRow, cluster_of: Callable[[RunRow], Cluster] = row_cluster) -> RowResult:
    """:func:`predict_row` whatever the row measured (its step time or, :mod:`plait.validate.memory`, its memory):
    the best-predicted feasible plan consistent with the row, estimated."""
    missing = row.missing_shape()
    if missing:
        return RowResult(row=row, reason=f"column {missing} is empty")
    try:
        engine = get_engine(row.run_engine)
        model, cluster = row_model(row, engine), cluster_of(row)
        plans = list(candidate_plans(row, engine))
        if not plans:
            return RowResult(row=row, reason="no plan is consistent with the row's layout")
        cols = PlanColumns.from_plans(plans)
        cols = cols.take(broken_rule_index(cols, model, cluster) < 0)
        if not len(cols):
            return RowResult(row=row, reason="no plan consistent with the row passes plait's plan rules")
        result = evaluate_batch(model, cluster, cols, engine.framework)
    except ConfigError as exc:
        return RowResult(row=row, reason=str(exc))
    step = result.step_time_s
    fits = result.memory["total"] <= cluster.accelerator.memory_bytes
    best = int(np.argmin(np.where(fits, step, np.inf))) if fits.any() else int(np.argmin(step))
    job = Job.checked(model, cluster, result.cols.plan(best), engine)  # its row passed the plan rules above
    chosen = assemble(job, result, best)
    return RowResult(row=row, estimate=chosen, candidates=len(cols), fits=bool(fits.any()))


class Scored:
    """Mean absolute percentage error over the rows with a prediction (``predicted``, each with ``row.source`` and
    ``error_pct``), overall and per source: step times and peak memory alike."""

    @property
    def predicted(self) -> list[Any]:
        raise NotImplementedError

    @property
    def mape_pct(self) -> float:
        """Mean absolute percentage error over predicted rows."""
        return mean(abs(r.error_pct) for r in self.predicted) if self.predicted else float("nan")

    def per_source(self) -> dict[str, float]:
        """MAPE per source."""
        sources = sorted({r.row.source for r in self.predicted})
        return {s: mean(abs(r.error_pct) for r in self.predicted if r.row.source == s) for s in sources}


@dataclass(frozen=True, kw_only=True)
class Validation(Scored):
    """All row results and their statistics."""

    results: list[RowResult]

    @property
    def predicted(self) -> list[RowResult]:
        """Rows with a prediction and a measurement."""
        return [r for r in self.results if r.estimate is not None]

    def interval_coverage(self) -> dict[str, object]:
        """Leave-one-source-out coverage of the nominal 80% step-time interval over these rows, overall and per
        source (:func:`plait.predict.intervals.loso_coverage`), and of the shipped interval on them."""
        if not self.predicted:
            return {}
        rows = residual_rows(self)
        overall, per_source = loso_coverage(rows)
        if not per_source:  # one source: nothing to leave out
            return {}
        shipped = sum(low <= (r.row.step_time_s or 0.0) <= high for r in self.predicted if r.estimate
                      for low, high in [r.estimate.step_time_interval_s])
        return {"nominal": NOMINAL, "leave_one_source_out": overall, "per_source": per_source,
                "shipped_interval": shipped / len(self.predicted)}

    def to_dict(self) -> dict[str, object]:
        """The JSON document of ``plait validate --json``."""
        return {
            "mape_pct": self.mape_pct,
            "rows": len(self.predicted),
            "rows_in_file": len(self.results),
            "per_source": self.per_source(),
            "interval_coverage": self.interval_coverage(),
            "results": [_result_dict(r) for r in self.predicted],
            "not_predicted": [{"id": r.row.id, "source": r.row.source, "reason": r.reason}
                              for r in self.results if r.estimate is None],
            "fill_rule": ("unknown knobs (micro_batch, recompute, sharding, sp, vpp, tp/pp) take the feasible value "
                          "with the best predicted step time"),
        }


def _result_dict(r: RowResult) -> dict[str, object]:
    """One predicted row of ``plait validate --json``."""
    assert r.estimate is not None
    low, high = r.estimate.step_time_interval_s
    return {"id": r.row.id, "source": r.row.source, "engine": r.estimate.engine,
            "predicted_step_time_s": r.estimate.step_time_s, "predicted_p10_s": low, "predicted_p90_s": high,
            "measured_step_time_s": r.row.step_time_s, "error_pct": r.error_pct,
            "layout": r.estimate.plan.describe(), "fits": r.fits, "candidates": r.candidates}


def validate_rows(rows: list[RunRow], progress: Progress | None = None) -> Validation:
    """Predict every row."""
    return Validation(results=each(rows, predict_row, progress))


def residual_rows(validation: Validation) -> list[tuple[str, float, float]]:
    """(source, log(measured / predicted), spread) of every predicted run."""
    out = []
    for r in validation.predicted:
        assert r.estimate is not None and r.row.step_time_s
        width = float(spread(dict(r.estimate.time.items()), r.estimate.moe_model))
        out.append((r.row.source, math.log(r.row.step_time_s / r.estimate.step_time_s), width))
    return out
