"""Validation against measured public runs; the accuracy bound is a test that can fail."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from plait.validate.report import validate_rows
from plait.validate.runs import read_runs

DEV_CSV = Path(__file__).parent / "data" / "dev.csv"
SHARED_CSV = Path(__file__).parents[2] / "shared" / "data" / "training_runs" / "dev.csv"

# The targets (10% overall, 15% for every source), met since the fourth session (9.58%; worst source
# narayanan_sc21 14.0%, docs/validation.md): a change that breaks either fails here.
MAPE_BOUND_PCT = 10.0
SOURCE_BOUND_PCT = 15.0


@pytest.fixture(scope="module")
def validation():
    return validate_rows(read_runs(DEV_CSV))


def test_every_row_with_a_step_time_is_predicted(validation) -> None:
    with_time = [r for r in validation.results if r.row.step_time_s is not None]
    assert len(validation.predicted) == len(with_time) == 132


def test_mape_bounds(validation) -> None:
    assert validation.mape_pct <= MAPE_BOUND_PCT
    assert all(m <= SOURCE_BOUND_PCT for m in validation.per_source().values()), validation.per_source()


def test_copy_matches_shared_dataset() -> None:
    if not SHARED_CSV.is_file():
        pytest.skip("shared dataset not present")
    assert DEV_CSV.read_bytes() == SHARED_CSV.read_bytes()


def test_json_output_schema() -> None:
    out = subprocess.run([sys.executable, "-m", "plait", "validate", "--runs", str(DEV_CSV), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert isinstance(doc["mape_pct"], float) and doc["rows"] == 132
    assert set(doc["per_source"]) == {"narayanan_sc21", "korthikanti_2022", "llmfoundry", "torchtitan", "nemo_2407",
                                      "mbridge_2511"}
    first = doc["results"][0]
    assert {"id", "predicted_step_time_s", "measured_step_time_s", "error_pct"} <= set(first)
    assert first["error_pct"] == pytest.approx(
        100 * (first["predicted_step_time_s"] - first["measured_step_time_s"]) / first["measured_step_time_s"])
    assert all(r["reason"] for r in doc["not_predicted"])
