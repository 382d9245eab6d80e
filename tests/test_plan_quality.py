"""Plan quality: on every dev run with a complete published layout, the planner's best plan predicts
a step time no worse than the published layout's prediction (same model, cluster, GPUs, batch,
precision and documented software)."""

from __future__ import annotations

import pytest

from plait.validate.datasets import dataset_path
from plait.validate.plan_quality import compare, complete
from plait.validate.runs import read_runs

ROWS = [r for r in read_runs(dataset_path("dev")) if complete(r)]


def test_there_are_complete_layouts() -> None:
    assert len(ROWS) >= 100


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_planner_is_no_worse_than_the_published_layout(row) -> None:
    case = compare(row)
    if case is None:
        pytest.skip("the published layout does not fit plait's memory model, so there is nothing to beat")
    assert case.planned.step_time_s <= case.published.step_time_s * (1 + 1e-9)
