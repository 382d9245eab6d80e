"""A candidate the cost model cannot cost is dropped with its reason counted; the search goes on."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from unittest import mock

import numpy as np

import plait.search.parts as parts
from plait.engine.catalog import get_engine
from plait.engine.facts import EngineFacts
from plait.errors import ConfigError
from plait.hardware.catalog import cluster_from_mapping, get_cluster
from plait.plan.columns import PlanColumns
from plait.plan.groups import rank_groups
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.search.rules import MEMORY_REASON
from plait.search.runner import run_search
from plait.search.space import default_space
from plait.workload.catalog import get_model
from tests.conftest import toy_cluster_mapping

H100 = get_cluster("dgx-h100-ib")


def test_deepseek_v3_on_4096_gpus_returns_ranked_plans() -> None:
    """``plait plan --model deepseek-v3 --cluster dgx-h100-ib --gpus 4096 --global-batch 2048`` stopped on the
    expert-gradient all-reduce of tp1 cp16 ep8 dp256, priced over 65,409 GPUs, and refused the whole search; the
    layouts of tensor degree 1 and 1 or 16 stages hold that candidate and the plan the whole space ranks first."""
    model = get_model("deepseek-v3")
    culprit = Plan(tp=1, cp=16, ep=8, dp_replicate=256, global_batch=2048)
    assert rank_groups(PlanColumns.one(culprit))["expert_dp"].span == 4096 - 8 + 1
    assert estimate(model, H100, culprit, engine=get_engine()).step_time_s > 0
    space = replace(default_space(model, H100, 4096, (2048,)), tp=(1,), pp=(1, 16))
    result = run_search(model, H100, space, workers=1, engine=get_engine())
    assert result.num_feasible > 0 and sum(result.reasons.values()) + result.num_feasible == result.num_candidates
    assert set(result.reasons) <= {*parts.reason_table(), *parts.engine_reasons(result.engine)}
    best = result.top(1)[0]
    assert best.num_gpus == 4096 and best.plan.ep > 1


def test_a_refused_row_is_dropped_and_its_neighbours_costed() -> None:
    """A batch with rows the cost model refuses (groups wider than the cluster's 1,024 GPUs) is costed without
    them; each refused row's message is counted once."""
    model, cluster = get_model("gpt3-125m"), cluster_from_mapping(toy_cluster_mapping(), "toy")
    sizes = [8, 2048, 16, 4096, 32]
    cols = PlanColumns.from_plans([Plan(dp_replicate=n, global_batch=n) for n in sizes])
    refused: Counter[str] = Counter()
    batches = parts.costed(model, cluster, cols, EngineFacts(), refused)
    kept = np.concatenate([batch.cols["dp_replicate"] for batch in batches])
    assert sorted(kept.tolist()) == [8, 16, 32]
    assert sum(refused.values()) == 2 and all("exceeds cluster toy" in reason for reason in refused)


def test_a_search_counts_what_the_cost_model_refuses() -> None:
    """Candidates whose chunk the cost model refuses are verdicts like any other: counted by their message, after
    memory, while the rest of the space is ranked."""
    model = get_model("llama3-8b")
    real = parts.evaluate_batch

    def refuse_cp2(model, cluster, cols, framework, **given):  # type: ignore[no-untyped-def]
        if (np.asarray(cols["cp"]) == 2).any():
            raise ConfigError("cp=2 refused by this test")
        return real(model, cluster, cols, framework, **given)

    with mock.patch.object(parts, "evaluate_batch", refuse_cp2):
        result = run_search(model, H100, default_space(model, H100, 16, (64,)), workers=1, engine=get_engine())
    assert result.reasons["cp=2 refused by this test"] > 0
    assert list(result.reasons)[-2:] == [MEMORY_REASON, "cp=2 refused by this test"]
    assert sum(result.reasons.values()) + result.num_feasible == result.num_candidates
    assert result.costed == (result.num_feasible + result.reasons[MEMORY_REASON]
                             + result.reasons["cp=2 refused by this test"])
    assert result.num_feasible > 0 and all(e.plan.cp != 2 for e in result.top(5))
