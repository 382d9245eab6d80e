"""One source of truth: a plan costed alone equals the same plan costed in a batch of many, to the last bit.

Three paths run the same cost model (:mod:`plait.plan.ops`): a batch of many (the planner, validation), a batch
of one (numpy arrays of length 1) and a single plan as plain Python numbers (:meth:`PlanColumns.one`, what
``plait estimate`` runs). They are compared on every dev-set row's plan, on random planner candidates and on
random plans over every Plan field; the plan rules and the capability table are compared the same way."""

from __future__ import annotations

import numpy as np
import pytest

from plait.cost.batch import BatchResult, evaluate_batch, peak_memory
from plait.engine.capability import unsupported_index
from plait.engine.catalog import engine_names, get_engine
from plait.hardware.catalog import get_cluster
from plait.plan.columns import CHOICES, PlanColumns
from plait.plan.plan import Plan
from plait.plan.rules import RULES, broken_rule_index
from plait.predict.estimate import estimate
from plait.search.enumerate import enumerate_space
from plait.search.parts import _memory_view
from plait.search.rules import prune
from plait.search.space import default_space
from plait.validate.datasets import dataset_path
from plait.validate.report import predict_row
from plait.validate.runs import read_runs
from plait.validate.translate import row_cluster, row_model
from plait.workload.catalog import get_model

DEV = dataset_path("dev")


def _same(batch: BatchResult, i: int, plan: Plan, model, cluster, framework) -> None:  # type: ignore[no-untyped-def]
    """Row ``i`` of ``batch`` equals ``plan`` costed as a batch of one and as a single plan, bit for bit."""
    one = evaluate_batch(model, cluster, PlanColumns.from_plans([plan]), framework)
    single = evaluate_batch(model, cluster, PlanColumns.one(plan), framework)
    assert isinstance(single.time["compute"], float) and isinstance(single.memory["total"], float)
    for name in batch.time:
        assert batch.time[name][i] == one.time[name][0] == single.time[name], name
    for name in batch.memory:
        assert batch.memory[name][i] == one.memory[name][0] == single.memory[name], name
    assert batch.memory_stage[i] == one.memory_stage[0] == single.memory_stage
    assert batch.model_flops_per_token[i] == single.model_flops_per_token
    assert batch.recompute_factor[i] == single.recompute_factor


def test_every_dev_row_alone_equals_its_batch() -> None:
    """Every predicted dev row's plan, batched with the other rows of its (engine, model, cluster)."""
    groups: dict[str, tuple] = {}
    for row in read_runs(DEV):
        result = predict_row(row)
        if result.estimate is None:
            continue
        engine = get_engine(row.run_engine)
        model, cluster = row_model(row, engine), row_cluster(row)
        key = repr((engine.spec, model, cluster))
        groups.setdefault(key, (engine, model, cluster, []))[3].append(result.estimate.plan)
    checked = 0
    for engine, model, cluster, plans in groups.values():
        batch = evaluate_batch(model, cluster, PlanColumns.from_plans(plans), engine.framework)
        for i, plan in enumerate(plans):
            _same(batch, i, plan, model, cluster, engine.framework)
            checked += 1
    assert checked == 148  # every predicted row


@pytest.mark.parametrize(("slug", "cluster", "gpus", "batch_size", "seed", "size"), [
    ("llama3-8b", "dgx-h100-ib", 16, 64, 0, 40),
    ("deepseek-v3", "gb200-nvl72", 256, 1024, 1, 60),  # MoE, MLA, fp8 and pipelines
])
def test_random_candidates_alone_equal_their_batch(slug: str, cluster: str, gpus: int, batch_size: int, seed: int,
                                                   size: int) -> None:
    """Random valid planner candidates; without a pipeline, ``estimate`` is the closed form itself."""
    model, hardware = get_model(slug), get_cluster(cluster)
    space = default_space(model, hardware, gpus, (batch_size,))
    cols = enumerate_space(model, space)
    valid = np.flatnonzero(prune(cols, model, hardware, space) < 0)
    rows = np.random.default_rng(seed).choice(valid, size=size, replace=False)
    framework = get_engine().framework
    batch = evaluate_batch(model, hardware, cols.take(rows), framework)
    for i, row in enumerate(rows):
        plan = cols.plan(int(row))
        _same(batch, i, plan, model, hardware, framework)
        if plan.pp == 1:
            assert batch.step_time_s[i] == estimate(model, hardware, plan, engine=get_engine()).step_time_s


_DEGREES = {"tp": (1, 2, 4, 8), "pp": (1, 2, 3, 4), "vpp": (1, 2), "cp": (1, 2), "ep": (1, 2, 4), "dp_replicate": (1, 2),
            "dp_shard": (1, 2, 4), "micro_batch": (1, 2), "recompute_layers": (-1, 0, 1)}
_FLAGS = ("sp", "master_weights", "offload_optimizer", "offload_params", "overlap_grad_reduce", "tp_comm_overlap")


_SYNCS = ("allreduce", "allreduce", "bf16", "powersgd:rank=4", "topk:ratio=0.01", "quantize:bits=4",
          "local_sgd:every=4")


def _random_plans(seed: int, count: int) -> list[Plan]:
    """Plans with every field drawn at random (most break a rule; the rest exercise every code path)."""
    rng = np.random.default_rng(seed)
    plans = []
    for _ in range(count):
        kwargs: dict = {k: int(rng.choice(v)) for k, v in _DEGREES.items()}
        kwargs |= {k: str(rng.choice(v)) for k, v in CHOICES.items()}
        kwargs |= {k: bool(rng.integers(2)) for k in _FLAGS}
        kwargs["global_batch"] = int(rng.choice((8, 16, 64)))
        kwargs["seq_len"] = int(rng.choice((0, 1024)))
        kwargs["dp_sync"] = str(rng.choice(_SYNCS))
        plans.append(Plan(**kwargs))
    return plans


@pytest.mark.parametrize(("slug", "cluster", "seed"), [
    ("llama3-8b", "dgx-h100-ib", 2), ("gpt3-175b", "dgx-a100-ib", 3), ("mixtral-8x7b", "dgx-h100-ib", 4),
    ("deepseek-v3", "gb200-nvl72", 5),
])
def test_random_plans_rules_capabilities_and_costs_agree(slug: str, cluster: str, seed: int) -> None:
    """Random plans over every field: the first broken rule and each engine's first refused option are the same
    for a single plan as in the batch, and every valid plan costs the same bits alone as in its batch."""
    model, hardware = get_model(slug), get_cluster(cluster)
    plans = _random_plans(seed, 3000)
    cols = PlanColumns.from_plans(plans)
    assert cols.plans(np.arange(len(plans))) == plans  # read back all at once as one at a time
    broken = broken_rule_index(cols, model, hardware)
    plain = cols["dp_sync"] == 0
    assert plain.any() and not plain.all()
    for rule in RULES:  # a rule a single all-reduce plan skips holds on every all-reduce row
        assert not rule.method_only or not np.asarray(rule.broken(cols, model, hardware))[plain].any(), rule.name
    engines = [get_engine(name) for name in engine_names()]
    refused = {e.spec: unsupported_index(cols, model, e, "cpu") for e in engines}
    for i, plan in enumerate(plans[:600]):
        single = PlanColumns.one(plan)
        assert broken_rule_index(single, model, hardware) == broken[i]
        assert all(unsupported_index(single, model, e, "cpu") == refused[e.spec][i] for e in engines)
    valid = [p.with_seq_len(model.seq_len) for p, b in zip(plans, broken, strict=True) if b < 0]
    assert len(valid) >= 20, "the random draw must leave valid plans to cost"
    framework = get_engine().framework
    batch = evaluate_batch(model, hardware, PlanColumns.from_plans(valid), framework)
    for i, plan in enumerate(valid):
        _same(batch, i, plan, model, hardware, framework)
    # the planner's memory screen, from the per-layer fields memory reads alone, finds the same peak to the bit
    assert batch.prepared is not None
    full, screen = (peak_memory(model, hardware, p) for p in
                    (batch.prepared, _memory_view(model, hardware, PlanColumns.from_plans(valid), framework, None)))
    assert all(np.array_equal(full[0][k], screen[0][k]) for k in full[0]) and np.array_equal(full[1], screen[1])


@pytest.mark.parametrize(("a", "b"), [(1.0, 2.0), (2.0, 1.0), (1, 1.0), (1.0, 1), (0.0, -0.0), (-0.0, 0.0),
                                      (float("nan"), 1.0), (1.0, float("nan")), (3, 2), (np.float64(2.0), 2)])
def test_scalar_maximum_and_minimum_are_the_builtins(a: float, b: float) -> None:
    """The single-plan path's maximum and minimum return what ``max(a, b)`` and ``min(a, b)`` return: the same
    object, the first on ties (so ``0.0`` and ``-0.0`` keep their order) and NaN where the builtins keep it."""
    from plait.plan.ops import SCALAR

    assert SCALAR.maximum(a, b) is max(a, b) and SCALAR.minimum(a, b) is min(a, b)
