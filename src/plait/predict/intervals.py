"""Prediction intervals of the step time: locally weighted split-conformal intervals on the development
runs' residuals.

A prediction ``t`` of a plan is wrong by the factor ``m / t`` the measured step ``m`` shows; its residual is
``r = log(m / t)``. Residuals are scaled by the prediction's *spread* ``1 + c + e``: ``c`` the share of the predicted
step that is not compute (exposed communication, pipeline bubble, optimizer), ``e`` 1 for a mixture-of-experts
model and 0 else (assumed: the cost model's compute side rests on measured kernel rates; its communication,
overlap and MoE sides on fewer and coarser figures, and the MoE rows are the widest residuals of the development
set, docs/status.md). The ``10%`` and ``90%`` conformal quantiles ``q`` of ``z = r / spread`` over the calibration
runs give the nominal 80% interval ``[t exp(q10 spread), t exp(q90 spread)]`` (Lei et al. 2018, "Distribution-Free
Predictive Inference for Regression", JASA 113(523), Sec. 2.2 split conformal and Sec. 5.2 locally weighted
residuals; the finite-sample quantile levels ``floor((n+1) a) / n`` and ``ceil((n+1) (1-a)) / n`` there). Whether
the width is honest is measured leave-one-source-out: each source's runs against quantiles from the other sources
(:func:`loso_coverage`; the test requires 75-90% overall).

The shipped quantiles (``data/intervals.toml``) are computed from the development set by
``python -m plait.validate.intervals --runs plait/validate/data/dev.csv --write src/plait/predict/data/intervals.toml``; a test
recomputes them, so a change to the cost model that moves the residuals must rewrite them.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from plait.cost.estimate import TimeBreakdown
from plait.packaged import packaged_toml
from plait.plan.ops import SCALAR, Ops

NOMINAL = 0.8
"""Nominal coverage of the interval (p10 to p90)."""
LOW, HIGH = (1 - NOMINAL) / 2, 1 - (1 - NOMINAL) / 2


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """The conformal quantiles of the scaled residuals."""

    lower: float
    """10% quantile of ``log(measured / predicted) / spread``."""
    upper: float
    """90% quantile of the same."""
    rows: int
    """Runs they were computed from."""
    source: str
    """How they were computed (the command and the dataset)."""


def spread(time_s: dict[str, Any], moe: bool, xp: Ops = SCALAR) -> Any:
    """``1 +`` the non-compute share of the step ``+ 1`` for an MoE model, per row (``time_s``: the step's
    components in seconds, :class:`plait.cost.estimate.TimeBreakdown` names without ``_s``: floats, or columns with
    ``xp`` = :data:`plait.plan.array_ops.ARRAY`)."""
    total = sum(time_s.values())
    compute = time_s["compute"] + time_s["recompute"]
    floor = xp.maximum(total, 1e-30)
    return 1.0 + (total - compute) / floor + (1.0 if moe else 0.0)


def bounds(step_s: Any, width: Any, calibration: Calibration | None = None, xp: Ops = SCALAR) -> tuple[Any, Any]:
    """(p10, p90) of a step predicted at ``step_s`` with spread ``width`` (floats, or columns with ``xp`` =
    :data:`plait.plan.array_ops.ARRAY`)."""
    cal = calibration or shipped()
    return step_s * xp.exp(cal.lower * width), step_s * xp.exp(cal.upper * width)


def step_interval_s(time: TimeBreakdown, moe: bool) -> tuple[float, float]:
    """(p10, p90) of a step whose breakdown is ``time`` (``moe``: a mixture-of-experts model), by the shipped
    calibration: what every :class:`plait.cost.estimate.Estimate` carries as ``step_time_interval_s``."""
    parts = dict(time.items())
    low, high = bounds(sum(parts.values()), spread(parts, moe))  # the sum is time.total_s, added in the same order
    return float(low), float(high)


def conformal_quantiles(z: list[float]) -> tuple[float, float]:
    """The split-conformal lower and upper quantiles of ``z`` for :data:`NOMINAL` coverage (Lei et al. 2018)."""
    ordered = sorted(z)
    n = len(ordered)
    if n == 0:
        raise ValueError("no residuals to calibrate on")
    lo = max(math.floor((n + 1) * LOW), 1)
    hi = min(math.ceil((n + 1) * HIGH), n)
    return ordered[lo - 1], ordered[hi - 1]


def calibrate(residuals: list[float], spreads: list[float], source: str) -> Calibration:
    """The calibration of residuals ``log(measured / predicted)`` with their spreads."""
    lower, upper = conformal_quantiles([r / s for r, s in zip(residuals, spreads)])
    return Calibration(lower=lower, upper=upper, rows=len(residuals), source=source)


def loso_coverage(rows: list[tuple[str, float, float]]) -> tuple[float, dict[str, float]]:
    """(overall, per source) share of runs inside the interval calibrated on the *other* sources' runs; ``rows``:
    (source, residual, spread) per run. ``(nan, {})`` with fewer than two sources: nothing to leave out."""
    sources = sorted({s for s, _, _ in rows})
    if len(sources) < 2:
        return math.nan, {}
    per_source: dict[str, float] = {}
    inside = 0
    for source in sources:
        lower, upper = conformal_quantiles([r / w for s, r, w in rows if s != source])
        mine = [(r, w) for s, r, w in rows if s == source]
        hits = sum(lower * w <= r <= upper * w for r, w in mine)
        per_source[source] = hits / len(mine)
        inside += hits
    return inside / len(rows), per_source


@functools.cache
def shipped() -> Calibration:
    """The calibration plait ships (``data/intervals.toml``)."""
    raw = packaged_toml("plait.predict", "data", "intervals.toml")
    return Calibration(lower=float(raw["lower"]), upper=float(raw["upper"]), rows=int(raw["rows"]),
                       source=str(raw["source"]))
