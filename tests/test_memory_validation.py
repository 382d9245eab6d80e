"""Predicted vs measured peak memory per GPU on public runs (issue 15): what each source's figure counts, and the
error over tests/data/memory_runs.csv as a bound that can fail."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from plait.cost.estimate import MemoryBreakdown
from plait.validate.memory import comparable_bytes, measured_kind, validate_memory

MEMORY_CSV = Path(__file__).parent / "data" / "memory_runs.csv"
MEMORY_BOUND_PCT = 25.0
"""Guards today's 23.6% (docs/status.md); issue 15's target is 8%."""


def test_each_kind_of_figure_counts_what_its_source_measures() -> None:
    """Reserved (the caching allocator's): without the CUDA context, workspaces and NCCL buffers; allocated: also
    without fragmentation; unstated: everything. Hand-computed on a breakdown of round numbers."""
    memory = MemoryBreakdown(stage=0, weights_bytes=10, gradients_bytes=20, optimizer_bytes=30, activations_bytes=40,
                             comm_buffers_bytes=5, runtime_reserved_bytes=7, fragmentation_bytes=3, capacity_bytes=200,
                             inflight_micro_batches=1)
    assert [measured_kind(k) for k in ("torch.cuda max reserved (memory_stats ...)",
                                       "torch.cuda.max_memory_allocated (...)", "not stated")] == [
        "reserved", "allocated", "device"]
    assert [comparable_bytes(memory, k) for k in ("reserved", "allocated", "device")] == [108, 105, 115]


def test_memory_error_on_public_runs_stays_within_its_bound() -> None:
    validation = validate_memory(MEMORY_CSV)
    assert len(validation.predicted) == 17 and len(validation.results) == 44
    assert validation.mape_pct <= MEMORY_BOUND_PCT
    assert all(r.reason for r in validation.results if r.predicted_gib is None)


def test_cli_prints_the_memory_validation_as_json() -> None:
    done = subprocess.run([sys.executable, "-m", "plait", "validate", "--memory", str(MEMORY_CSV), "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    first = doc["results"][0]
    assert doc["rows"] == 17 and first["error_pct"] == pytest.approx(
        100 * (first["predicted_gib"] - first["measured_gib"]) / first["measured_gib"])
    refused = subprocess.run([sys.executable, "-m", "plait", "validate"], capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "pass one of --runs" in refused.stderr and "Traceback" not in refused.stderr
