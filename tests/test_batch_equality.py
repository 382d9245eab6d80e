"""One source of truth: a plan costed alone (the batch-of-one shortcuts of plait.cost) equals the same plan
costed in a batch of many, to the last bit, on every dev-set row's plan and on random planner candidates."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from plait.cost.batch import evaluate_batch
from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.plan.columns import PlanColumns
from plait.search.enumerate import enumerate_space
from plait.search.rules import prune
from plait.search.space import default_space
from plait.validate.report import predict_row
from plait.validate.runs import read_runs
from plait.validate.translate import row_cluster, row_model
from plait.workload.catalog import get_model

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


def test_random_candidates_alone_equal_their_batch() -> None:
    model, cluster = get_model("deepseek-v3"), get_cluster("gb200-nvl72")  # MoE, MLA, fp8 and pipelines
    space = default_space(model, cluster, 256, (1024,))
    cols = enumerate_space(model, space)
    valid = np.flatnonzero(prune(cols, model, cluster, space) < 0)
    rows = np.random.default_rng(1).choice(valid, size=60, replace=False)
    batch = evaluate_batch(model, cluster, cols.take(rows))
    for i, row in enumerate(rows):
        _same(batch, evaluate_batch(model, cluster, PlanColumns.from_plans([cols.plan(int(row))])), i)
