"""The long-sequence rows of the dev set: how much of each step plait gives the attention core, and how much of the
gap to the measurement would have to sit there.

For every row of ``plait/validate/data/dev.csv`` (or ``--runs FILE``) with 32,768 or more tokens per sequence and a
measured step time (torchtitan's Table 2 and Table 6 context-parallel rows, llm-foundry's long-sequence MPT rows)
this prints:

- ``meas`` and ``pred``: the measured and predicted step time (s);
- ``core``: the part of the predicted step that the attention core takes (``QK^T``, softmax and ``PV`` forward, their
  recomputation under full activation checkpointing, and their backward; ring steps and merges excluded), found as
  the growth of the prediction when the accelerator's attention curve is halved, so that a pipeline's fill and
  drain and the overlap of the context-parallel exchange count as the estimate counts them;
- ``x core``: the factor on that core time that the measurement implies if every other part of the prediction were
  right, ``1 + (meas - pred) / core``. A diagnostic of where the gap could sit, not a figure plait uses: nothing is
  fitted, and the printed prediction is plait's own.

Run: ``python benchmarks/long_seq_rows.py`` (about a second; ``--runs`` for another runs file).
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
LONG_SEQ_TOKENS = 32768
"""Sequences at least this long: the torchtitan context-parallel tables start there (32k on each GPU)."""


def _slow_attention(cluster):
    """The cluster with its attention curve at half its fractions (the attention core twice as long)."""
    return with_curve_scaled(cluster, "attention", 0.5)


@dataclasses.dataclass(frozen=True)
class LongRow:
    """One long-sequence row (seconds per step)."""

    row_id: str
    seq_len: int
    cp: int
    measured_s: float
    predicted_s: float
    core_s: float
    """The predicted step's attention-core time (growth of the prediction under a halved attention curve)."""
    same_plan: bool
    """Whether the halved curve left the row's filled-in plan unchanged (else ``core_s`` mixes two plans)."""

    @property
    def core_factor(self) -> float:
        """The factor on ``core_s`` that would close the row's gap if the rest of the prediction were right."""
        return 1.0 + (self.measured_s - self.predicted_s) / self.core_s


def long_rows(rows: list[RunRow]) -> list[LongRow]:
    """The rows of ``rows`` with a measured step time at :data:`LONG_SEQ_TOKENS` tokens or more (rows plait cannot
    predict are left out)."""
    rows = [r for r in rows if r.step_time_s and (r.seq_len or 0) >= LONG_SEQ_TOKENS]
    plain = {r.id: predict_row(r) for r in rows}
    slow = {r.id: predict_row(r, lambda row: _slow_attention(row_cluster(row))) for r in rows}
    out = []
    for row in rows:
        est, est_slow = plain[row.id].estimate, slow[row.id].estimate
        if est is None or est_slow is None or row.step_time_s is None:
            continue
        out.append(
            LongRow(
                row.id,
                est.plan.seq_len,
                est.plan.cp,
                row.step_time_s,
                est.step_time_s,
                est_slow.step_time_s - est.step_time_s,
                est_slow.plan == est.plan,
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=DEV, help="runs CSV (default: the dev set)")
    args = parser.parse_args()
    print(f"{'row':48s} {'seq':>7s} {'cp':>3s} {'meas':>8s} {'pred':>8s} {'err':>7s} {'core':>8s} {'x core':>6s}")
    for r in long_rows(read_runs(args.runs)):
        flag = "" if r.same_plan else "  (plan changed)"
        print(
            f"{r.row_id:48s} {r.seq_len:7d} {r.cp:3d} {r.measured_s:8.2f} {r.predicted_s:8.2f} "
            f"{100 * (r.predicted_s / r.measured_s - 1):+6.1f}% {r.core_s:8.2f} {r.core_factor:6.2f}{flag}"
        )


if __name__ == "__main__":
    main()
