"""benchmarks/moe_rows.py: every MoE row of the dev set is seen per layer pass, and taking the host stream away
never makes a prediction slower (the host stream only adds: plait/cost/host.py joins it by max and sums)."""

from __future__ import annotations

from plait.validate.datasets import dataset_path
from plait.validate.runs import read_runs
from tests.conftest import load_benchmark

BENCH = load_benchmark("moe_rows")


def test_every_moe_row_is_seen_and_the_host_stream_only_adds() -> None:
    rows = read_runs(dataset_path("dev"))
    moe = {r.id for r in rows if r.moe_experts and r.step_time_s}
    passes = BENCH.layer_passes(rows)
    assert {p.row_id for p in passes} == moe and len(moe) >= 16
    for p in passes:
        assert p.passes > 0 and p.host_ms > 0
        assert p.device_ms <= p.predicted_ms * (1 + 1e-9), p
    x86 = [p for p in passes if p.launch_us < 20]
    assert x86 and any(p.predicted_ms > 1.05 * p.device_ms for p in x86)  # the host shows on some x86 row
