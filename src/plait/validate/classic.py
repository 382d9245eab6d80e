"""One measured row, predicted or not, and the mean error over rows: what every kind's ``plait validate`` reader
returns (traced modules' classic data parallelism, :mod:`plait.workloads.traced.validate`; GNN and DiT runs)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClassicResult:
    """One row, predicted or not."""

    source: str
    label: str
    measured_per_s: float
    predicted_per_s: float | None
    why_not: str = ""

    @property
    def error_pct(self) -> float | None:
        """Step-time error: predicted over measured step time, minus one (the throughputs' inverse ratio)."""
        if self.predicted_per_s is None:
            return None
        return 100.0 * (self.measured_per_s / self.predicted_per_s - 1.0)


def mape(results: list[ClassicResult]) -> float:
    """Mean absolute step-time error (%) over the predicted rows."""
    errors = [abs(r.error_pct) for r in results if r.error_pct is not None]
    return sum(errors) / len(errors) if errors else float("nan")
