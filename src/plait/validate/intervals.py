"""Calibrate the step-time intervals on measured runs and measure their leave-one-source-out coverage
(:mod:`plait.predict.intervals`).

Run: python -m plait.validate.intervals --runs plait/validate/data/dev.csv [--write src/plait/predict/data/intervals.toml]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import tomli_w

from plait.predict.intervals import Calibration, calibrate, loso_coverage
from plait.validate.report import Validation, residual_rows, validate_rows
from plait.validate.runs import read_runs


def calibration_of(validation: Validation, dataset: str) -> Calibration:
    """The calibration of every predicted run of ``validation`` (``dataset``: named in its source)."""
    rows = residual_rows(validation)
    return calibrate([r for _, r, _ in rows], [w for _, _, w in rows],
                     f"python -m plait.validate.intervals --runs {dataset}: split-conformal quantiles of "
                     f"log(measured / predicted) / spread over its {len(rows)} predicted runs")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, required=True, help="CSV of measured runs")
    parser.add_argument("--write", type=Path, default=None, help="write the calibration here (TOML)")
    args = parser.parse_args(argv)
    validation = validate_rows(read_runs(args.runs))
    cal = calibration_of(validation, args.runs.as_posix())
    overall, per_source = loso_coverage(residual_rows(validation))
    print(f"quantiles of the scaled residuals: {cal.lower:+.4f} .. {cal.upper:+.4f} over {cal.rows} runs")
    print(f"leave-one-source-out coverage of the nominal 80% interval: {100 * overall:.1f}%")
    for source, share in per_source.items():
        print(f"  {source}: {100 * share:.1f}%")
    if args.write:
        args.write.write_text(tomli_w.dumps({"lower": cal.lower, "upper": cal.upper, "rows": cal.rows,
                                             "source": cal.source}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
