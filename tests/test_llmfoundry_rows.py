"""benchmarks/llmfoundry_rows.py: each llm-foundry row it prints has its GEMM and attention time inside its predicted
step (halving either curve only adds time, and together they leave room for the rest) and keeps its plan under
the halved curves, so the printed shares belong to the printed prediction."""

from __future__ import annotations

from plait.validate.datasets import dataset_path
from plait.validate.runs import read_runs
from tests.conftest import load_benchmark

BENCH = load_benchmark("llmfoundry_rows")


# GEMM-bound (1k, recomputing), without recomputation (2k) and attention-bound (64k): MPT-7B on 8 H100
IDS = {f"llmfoundry_h100_80gb_mpt7b_{shape}" for shape in ("s1024_n8_gbs1024", "s2048_n8_gbs48", "s65536_n8_gbs16")}


def test_mpt7b_rows_split_their_step_and_close_their_gap() -> None:
    rows = [r for r in read_runs(dataset_path("dev")) if r.id in IDS]
    seen = BENCH.foundry_rows(rows)
    assert {r.row_id for r in seen} == IDS
    for r in seen:
        assert 0.0 < r.gemm_s and 0.0 < r.attention_s and r.gemm_s + r.attention_s < r.predicted_s, r
        assert 0.0 < r.memory < 1.0 and r.same_plan, r
