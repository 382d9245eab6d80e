"""benchmarks/vs_calculon.py: its plans are well formed and plait predicts each; Calculon's side runs only where a
checkout is named by ``$PLAIT_CALCULON_DIR`` (skipped otherwise)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from plait.hardware.catalog import get_cluster
from plait.plan import rules
from plait.plan.plan import Plan
from plait.workload.catalog import get_model
from tests.conftest import load_benchmark

BENCH = load_benchmark("vs_calculon")


def test_plan_list_is_well_formed() -> None:
    assert 3 <= len(BENCH.CASES) <= 5
    assert len({c.name for c in BENCH.CASES}) == len(BENCH.CASES)
    assert {c.plan.num_gpus for c in BENCH.CASES} <= {384, 3072}
    cluster = get_cluster(BENCH.PLAIT_CLUSTER)
    for case in BENCH.CASES:
        model = get_model(case.plait_model)
        rules.check_plan(case.plan.with_seq_len(model.seq_len), model, cluster)
        exe = BENCH.calculon_execution(case.plan, True)
        assert exe["num_procs"] == exe["tensor_par"] * exe["pipeline_par"] * exe["data_par"] == case.plan.num_gpus
        assert exe["batch_size"] % (exe["data_par"] * exe["microbatch_size"]) == 0


@pytest.mark.parametrize("case", BENCH.CASES, ids=[c.name for c in BENCH.CASES])
def test_plait_predicts_each_plan(case) -> None:
    step_s = BENCH.plait_evaluator(case)()
    assert math.isfinite(step_s) and 1.0 < step_s < 200.0


def test_a_plan_calculon_cannot_express_is_refused() -> None:
    with pytest.raises(ValueError, match="cp and ep must be 1"):
        BENCH.calculon_execution(Plan(tp=8, cp=2, dp_shard=4, global_batch=64), True)


def test_without_a_checkout_it_prints_one_line_and_exits_0(monkeypatch, capsys, tmp_path: Path) -> None:
    monkeypatch.delenv(BENCH.ENV_VAR, raising=False)
    assert BENCH.main(["--calculon", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "git clone https://github.com/calculon-ai/calculon" in out


def test_calculon_predicts_each_plan() -> None:
    root = BENCH.calculon_root(None)
    if root is None:
        pytest.skip(f"no Calculon checkout (set {BENCH.ENV_VAR})")
    side = BENCH.CalculonSide(root)
    fields = set(side.llm.Execution.fields())
    for case in BENCH.CASES:
        assert set(BENCH.calculon_execution(case.plan, True)) == fields  # the mapping sets every knob it has
        step_s = side.evaluator(case)()
        assert math.isfinite(step_s) and 1.0 < step_s < 200.0
