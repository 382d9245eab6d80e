"""llm-foundry's MPT rows of the dev set: where plait's prediction of each step goes, how near it puts the row to the
GPU's memory, and which factor on its GEMM time the measurement would imply.

For every row of source ``llmfoundry`` in ``plait/validate/data/dev.csv`` (or ``--runs FILE``) this prints:

- ``meas``, ``pred``, ``err``: measured and predicted step time (s) and the signed error;
- ``gemm``, ``attn``: the shares of the predicted step that the GEMMs and the attention core take, found as the
  growth of the prediction when the accelerator's ``matmul_bf16`` (or ``attention``) curve is halved, so the
  overlap of FSDP's collectives counts as the estimate counts it;
- ``mem``: plait's predicted peak memory over the GPU's capacity;
- ``x gemm``: the factor on the GEMM time that would close the row's gap if every other part were right,
  ``1 + (meas - pred) / gemm``. A diagnostic of where the gap could sit, not a figure plait uses: nothing is fitted.

The H100 rows imply about the same factor at every sequence length while the attention-bound rows at 32k-64k are
within a few percent, so their gap sits with the GEMM-bound part of the step, not in the attention kernel; the
rows the factor leaves out of line are the ones plait puts nearest the memory limit (docs/research/
framework_facts.md section 1). Run: ``python benchmarks/llmfoundry_rows.py`` (a few seconds).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from plait.validate.report import predict_row
from plait.validate.runs import RunRow, read_runs
from plait.validate.sensitivity import with_curve_scaled
from plait.validate.translate import row_cluster

DEV = Path(__file__).parents[1] / "src" / "plait" / "validate" / "data" / "dev.csv"


def _halved(curve_name: str):
    """A cluster function giving each row's cluster with its ``curve_name`` efficiency at half its fractions."""
    return lambda row: with_curve_scaled(row_cluster(row), curve_name, 0.5)


@dataclasses.dataclass(frozen=True)
class FoundryRow:
    """One llm-foundry row (seconds per step; ``memory`` a fraction of the GPU's)."""

    row_id: str
    measured_s: float
    predicted_s: float
    gemm_s: float
    """The predicted step's GEMM time (growth of the prediction under a halved ``matmul_bf16`` curve)."""
    attention_s: float
    """The same for the attention core (a halved ``attention`` curve)."""
    memory: float
    same_plan: bool
    """Whether both halved curves left the row's filled-in plan unchanged (else the shares mix plans)."""

    @property
    def gemm_factor(self) -> float:
        """The factor on ``gemm_s`` that would close the row's gap if the rest of the prediction were right."""
        return 1.0 + (self.measured_s - self.predicted_s) / self.gemm_s


def foundry_rows(rows: list[RunRow]) -> list[FoundryRow]:
    """The ``llmfoundry`` rows of ``rows`` with a measured step time (rows plait cannot predict are left out)."""
    out = []
    for row in rows:
        if row.source != "llmfoundry" or not row.step_time_s:
            continue
        est = predict_row(row).estimate
        gemm = predict_row(row, _halved("matmul_bf16")).estimate
        attn = predict_row(row, _halved("attention")).estimate
        if est is None or gemm is None or attn is None:
            continue
        pred = est.step_time_s
        out.append(
            FoundryRow(
                row.id,
                row.step_time_s,
                pred,
                gemm.step_time_s - pred,
                attn.step_time_s - pred,
                est.memory.total_bytes / est.memory.capacity_bytes,
                gemm.plan == est.plan == attn.plan,
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=DEV, help="runs CSV (default: the dev set)")
    args = parser.parse_args()
    print(f"{'row':46s} {'meas':>8s} {'pred':>8s} {'err':>7s} {'gemm':>5s} {'attn':>5s} {'mem':>5s} {'x gemm':>6s}")
    for r in foundry_rows(read_runs(args.runs)):
        flag = "" if r.same_plan else "  (plan changed)"
        print(
            f"{r.row_id:46s} {r.measured_s:8.2f} {r.predicted_s:8.2f} {100 * (r.predicted_s / r.measured_s - 1):+6.1f}% "
            f"{r.gemm_s / r.predicted_s:5.2f} {r.attention_s / r.predicted_s:5.2f} {r.memory:5.2f} "
            f"{r.gemm_factor:6.2f}{flag}"
        )


if __name__ == "__main__":
    main()
