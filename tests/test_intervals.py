"""Step-time intervals: split-conformal quantiles by hand, the shipped calibration recomputed from the
development set, its leave-one-source-out coverage in [75%, 90%], and ranking plans by the 90% bound."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from plait.plan.array_ops import ARRAY
from plait.predict.intervals import Calibration, bounds, conformal_quantiles, loso_coverage, shipped, spread
from plait.validate.datasets import dataset_path
from plait.validate.intervals import calibration_of, residual_rows
from plait.validate.report import validate_rows
from plait.validate.runs import read_runs
from tests.conftest import toy_cluster_mapping

DEV_CSV = dataset_path("dev")


@pytest.fixture(scope="module")
def validation():
    return validate_rows(read_runs(DEV_CSV))


def test_conformal_quantiles_and_bounds_by_hand() -> None:
    """Nine residuals 1..9: the 10% level is the floor(10 x 0.1) = 1st, the 90% level the ceil(10 x 0.9) = 9th;
    a spread of 2 doubles the log-width."""
    assert conformal_quantiles([float(x) for x in range(9, 0, -1)]) == (1.0, 9.0)
    cal = Calibration(lower=-0.1, upper=0.2, rows=9, source="hand")
    low, high = bounds(10.0, 2.0, cal)
    assert low == pytest.approx(10.0 * 2.718281828459045 ** -0.2) and high == pytest.approx(10.0 * 2.718281828459045 ** 0.4)
    time = {"compute": 6.0, "recompute": 1.0, "tp_comm": 2.0, "pp_bubble": 1.0}
    assert spread(time, moe=False) == pytest.approx(1.3) and spread(time, moe=True) == pytest.approx(2.3)
    columns = {k: np.array([v, 2 * v]) for k, v in time.items()}  # a batch's columns: the same figures per row
    assert list(spread(columns, moe=False, xp=ARRAY)) == pytest.approx([1.3, 1.3])
    low_rows, high_rows = bounds(np.array([10.0, 20.0]), np.array([2.0, 2.0]), cal, xp=ARRAY)
    assert list(low_rows) == pytest.approx([low, 2 * low]) and list(high_rows) == pytest.approx([high, 2 * high])


def test_the_shipped_calibration_is_the_development_sets(validation) -> None:
    """Rewritten whenever the cost model moves the residuals (python -m plait.validate.intervals --write ...)."""
    fresh, ours = calibration_of(validation, "src/plait/validate/data/dev.csv"), shipped()
    assert (fresh.lower, fresh.upper, fresh.rows) == pytest.approx((ours.lower, ours.upper, ours.rows), abs=1e-9)


def test_leave_one_source_out_coverage_of_the_80_percent_interval(validation) -> None:
    """The issue's check: each source's runs against quantiles from the other sources cover 75-90% of all runs."""
    overall, per_source = loso_coverage(residual_rows(validation))
    assert 0.75 <= overall <= 0.90, per_source
    assert set(per_source) == {r.row.source for r in validation.predicted}


def test_estimates_carry_their_interval_and_moe_is_wider(validation) -> None:
    from plait.engine.catalog import get_engine
    from plait.hardware.catalog import get_cluster
    from plait.plan.plan import Plan
    from plait.predict.estimate import estimate
    from plait.workload.catalog import get_model

    cluster = get_cluster("dgx-h100-ib")
    dense = estimate(get_model("llama3-8b"), cluster, Plan(dp_shard=8, sharding="zero3", global_batch=64),
                     engine=get_engine())
    low, high = dense.step_time_interval_s
    assert low < dense.step_time_s < high and dense.to_dict()["step_time_p90_s"] == high
    moe = estimate(get_model("mixtral-8x7b"), cluster, Plan(dp_shard=8, ep=8, sharding="zero3", global_batch=64),
                   engine=get_engine())
    assert moe.step_time_interval_s[1] / moe.step_time_s > high / dense.step_time_s


def test_ranking_by_the_90_percent_bound_prefers_plans_that_are_fast_if_wrong(tmp_path: Path) -> None:
    """On 5 GB/s Ethernet the fastest predicted plan leans on communication; ranked by p90 a plan that recomputes
    and hides it wins: its 90% bound is lower, its point estimate not."""
    from plait.cli.main import run_cli

    slow = tmp_path / "slow.yaml"
    slow.write_text(yaml.safe_dump(toy_cluster_mapping(network_gb_per_s=5.0)))
    tops = {}
    for rank_by in ("p50", "p90"):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            assert run_cli(["plan", "--model", "gpt3-1.3b", "--cluster", str(slow), "--gpus", "16", "--global-batch",
                            "64", "--dp-sync", "allreduce", "--rank-by", rank_by, "--json", "--top", "3"]) == 0
        doc = json.loads(out.getvalue())
        assert doc["rank_by"] == rank_by
        tops[rank_by] = doc["top"][0]
    assert tops["p50"]["layout"] != tops["p90"]["layout"]
    assert tops["p90"]["step_time_p90_s"] < tops["p50"]["step_time_p90_s"]
    assert tops["p50"]["step_time_s"] <= tops["p90"]["step_time_s"]


def test_one_source_has_nothing_to_leave_out() -> None:
    overall, per_source = loso_coverage([("a", 0.1, 1.0), ("a", 0.2, 1.0)])
    assert per_source == {} and math.isnan(overall)
