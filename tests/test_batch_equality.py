"""One source of truth: a plan costed alone (the batch-of-one shortcuts of plait.cost) equals the same plan
costed in a batch of many, to the last bit, on every dev-set row's plan (random planner candidates:
tests/test_search.py::test_batch_evaluation_equals_single_estimates)."""

from __future__ import annotations

from pathlib import Path

from plait.cost.batch import evaluate_batch
from plait.engine.catalog import get_engine
from plait.plan.columns import PlanColumns
from plait.validate.report import predict_row
from plait.validate.runs import read_runs
from plait.validate.translate import row_cluster, row_model

DEV = Path(__file__).parent / "data" / "dev.csv"


def _same(batch, alone, i: int) -> None:  # type: ignore[no-untyped-def]
    for name in batch.time:
        assert batch.time[name][i] == alone.time[name][0], name
    for name in batch.memory:
        assert batch.memory[name][i] == alone.memory[name][0], name


def test_every_dev_row_alone_equals_its_batch() -> None:
    """Every predicted dev row's plan, batched with the other rows of its (engine, model, cluster)."""
    groups: dict[str, tuple] = {}
    for row in read_runs(DEV):
        result = predict_row(row)
        if result.estimate is None:
            continue
        engine = get_engine(row.engine)
        model, cluster = row_model(row, engine), row_cluster(row)
        key = repr((engine.spec, model, cluster))
        groups.setdefault(key, (engine, model, cluster, []))[3].append(result.estimate.plan)
    checked = 0
    for engine, model, cluster, plans in groups.values():
        batch = evaluate_batch(model, cluster, PlanColumns.from_plans(plans), engine.framework)
        for i, plan in enumerate(plans):
            _same(batch, evaluate_batch(model, cluster, PlanColumns.from_plans([plan]), engine.framework), i)
            checked += 1
    assert checked == 132  # every predicted row
