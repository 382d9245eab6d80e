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
    """Every row of the copy is the shared dataset's row, measured figures and notes alike; the copy's engine
    column only adds the run options its notes document (tests/data/README.md), and the rows it leaves out are the
    mixture-of-experts runs (not yet validated: issue 15)."""
    import csv

    if not SHARED_CSV.is_file():
        pytest.skip("shared dataset not present")
    with DEV_CSV.open(newline="") as a, SHARED_CSV.open(newline="") as b:
        ours, shared = list(csv.DictReader(a)), {r["id"]: r for r in csv.DictReader(b)}
    for row in ours:
        theirs = shared.pop(row["id"])
        assert {k: v for k, v in row.items() if k != "engine"} == {k: theirs[k] for k in row if k != "engine"}
        renamed = row["source"] == "narayanan_sc21" and row["sharding"] == "zero3"  # Narayanan Table 2: DeepSpeed
        expected = "deepspeed@2021" if renamed else theirs["engine"]
        assert row["engine"].split("[")[0] == expected, row["id"]
    assert shared and all(r["moe_experts"] for r in shared.values())


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
