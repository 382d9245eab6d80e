"""benchmarks/long_seq_rows.py: every long-sequence row of the dev set is seen, its attention core is a part of its
predicted step (halving the attention curve only adds time), and the halved curve keeps each row's plan, so the
printed core belongs to the printed prediction."""

from __future__ import annotations

from plait.validate.datasets import dataset_path
from plait.validate.runs import read_runs
from tests.conftest import load_benchmark

BENCH = load_benchmark("long_seq_rows")


def test_every_long_row_is_seen_with_its_core_inside_its_step() -> None:
    rows = read_runs(dataset_path("dev"))
    long = {r.id for r in rows if r.step_time_s and (r.seq_len or 0) >= BENCH.LONG_SEQ_TOKENS}
    seen = BENCH.long_rows(rows)
    assert {r.row_id for r in seen} == long and any(r.cp > 1 for r in seen)
    for r in seen:
        assert 0.0 < r.core_s < r.predicted_s, r
        assert r.same_plan, r
