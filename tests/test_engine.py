"""Engines: every fact cited, one capability table read by planner, exporter and estimate, and rankings for two
engines that differ exactly where the engines' documented facts differ."""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np
import pytest

from plait.cost.batch import evaluate_batch
from plait.engine.capability import FEATURES, first_unsupported, unsupported_index
from plait.engine.catalog import DEFAULT_ENGINE, engine_names, get_engine
from plait.engine.facts import EngineFacts
from plait.errors import ConfigError
from plait.export.bundle import export_for
from plait.hardware.catalog import get_cluster
from plait.job import Job
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.search.enumerate import enumerate_space
from plait.search.runner import run_search
from plait.search.space import default_space
from plait.workload.catalog import get_model

MODEL = get_model("llama3-8b")
CLUSTER = get_cluster("dgx-h100-ib")


@pytest.mark.parametrize("key", engine_names())
def test_every_engine_fact_is_cited(key: str) -> None:
    engine = get_engine(key)
    changed = [f.name for f in fields(EngineFacts) if getattr(engine.framework, f.name) != getattr(EngineFacts(), f.name)]
    for name in changed:
        assert name in engine.sources or "framework" in engine.sources, f"{key}: framework.{name} has no source"
    for name in ("dropout", "sequence_parallel", "grad_reduce_dtype", "selective_full_every"):
        default = {"dropout": False, "sequence_parallel": None, "grad_reduce_dtype": "", "selective_full_every": 0}[name]
        if getattr(engine, name) != default:
            assert name in engine.sources, f"{key}: {name} has no source"
    assert all(why.strip() for why in engine.unsupported.values())
    assert set(engine.unsupported) <= set(FEATURES)


def test_engine_specs_and_bad_specs() -> None:
    assert get_engine().name == DEFAULT_ENGINE
    assert get_engine("torchtitan@0.3.0").spec == "torchtitan@0.3.0"
    assert get_engine("torchtitan[compile=false]").framework.pointwise == "eager"
    assert get_engine("torchtitan@9").spec == "torchtitan@0.3.0"  # the nearest known version, with a warning
    for bad, fragment in (("nosuch", "unknown engine"), ("torchtitan@next", "unknown engine"),
                          ("torchtitan[compile=maybe]", "compile='maybe' must be one of"),
                          ("torchtitan[fast=true]", "no option 'fast'"), ("torch titan", "must read")):
        with pytest.raises(ConfigError, match=fragment):
            get_engine(bad)


def test_refusal_names_the_option_and_the_engine() -> None:
    plan = Plan(dp_shard=8, sharding="zero1", global_batch=64)
    message = first_unsupported(plan, MODEL, get_engine("torchtitan"))
    assert message and message.startswith("sharding='zero1' is not supported by torchtitan@0.3.0: ")
    assert first_unsupported(plan, MODEL, get_engine("megatron-core")) is None
    with pytest.raises(ConfigError, match="cannot export: sharding='zero1' is not supported by torchtitan"):
        export_for(Job.build(MODEL, CLUSTER, plan, get_engine("torchtitan")), "llama3-8b", "dgx-h100-ib")
    est = estimate(MODEL, CLUSTER, plan, engine=get_engine("torchtitan"))
    assert est.engine == "torchtitan@0.3.0" and any("zero1" in w for w in est.warnings)


def test_planner_searches_only_what_the_engine_can_run() -> None:
    space = default_space(MODEL, CLUSTER, 16, (64,))
    for key in ("torchtitan", "deepspeed", "maxtext", "megatron-core"):
        engine = get_engine(key)
        result = run_search(MODEL, CLUSTER, space, engine=engine)
        for est in result.top(20):
            assert first_unsupported(est.plan, MODEL, engine) is None, (key, est.plan.describe())
            assert est.engine == engine.spec
        refused = sum(n for reason, n in result.reasons.items() if reason.startswith(f"{engine.name} cannot run"))
        assert refused > 0


def test_rankings_of_two_engines_differ_exactly_where_their_facts_do() -> None:
    """megatron-core and deepspeed@0.16 differ in two time facts (ZeRO-3 gathers per module, not per layer, and
    not the tensors under its persistence threshold), in two
    memory facts (the loss's bytes per logit, Transformer Engine's fp8 weight copies) and in their capability
    lists: plans both can run and that do not shard parameters take the same time to the last bit,
    zero3 plans cost differently, and the candidates each refuses are exactly those with its unsupported options."""
    a, b = get_engine("megatron-core"), get_engine("deepspeed")
    differ = [f.name for f in fields(EngineFacts) if getattr(a.framework, f.name) != getattr(b.framework, f.name)]
    assert differ == ["shard_unit", "shard_persist_below", "loss_bytes_per_logit", "fp8_weight_cache_bytes", "moe_host_sync", "moe_launches_fixed", "moe_launches_per_expert",
                      "moe_quantized_per_expert", "moe_fp8_padding", "moe_host_ops_fwd_per_expert", "moe_host_ops_bwd_per_expert"] and MODEL.moe is None  # MoE facts cost nothing on a dense model
    cols = enumerate_space(MODEL, default_space(MODEL, CLUSTER, 16, (64,)))
    cols = cols.take(np.arange(0, len(cols), 97))  # a spread sample of the space
    refused_a, refused_b = (unsupported_index(cols, MODEL, e) >= 0 for e in (a, b))
    for engine, refused in ((a, refused_a), (b, refused_b)):
        listed = np.zeros(len(cols), dtype=bool)
        for name in engine.unsupported:
            listed |= np.asarray(FEATURES[name].present(cols, MODEL), dtype=bool)
        assert np.array_equal(listed, refused)
    both = cols.take(~refused_a & ~refused_b)
    time_a = evaluate_batch(MODEL, CLUSTER, both, a.framework).step_time_s
    time_b = evaluate_batch(MODEL, CLUSTER, both, b.framework).step_time_s
    zero3 = both.is_("sharding", "zero3") & (both["dp_shard"] > 1)
    assert zero3.any() and (~zero3).any()
    assert np.array_equal(time_a[~zero3], time_b[~zero3])
    assert np.all(time_a[zero3] != time_b[zero3])


def test_estimate_changes_only_through_the_engine_facts() -> None:
    plan = Plan(dp_shard=8, sharding="zero3", global_batch=64)
    titan = estimate(MODEL, CLUSTER, plan, engine=get_engine("torchtitan"))
    same = estimate(MODEL, CLUSTER, plan, engine=replace(get_engine(), framework=get_engine("torchtitan").framework))
    assert titan.step_time_s == same.step_time_s
    eager = estimate(MODEL, CLUSTER, plan, engine=get_engine("torchtitan[compile=false]"))
    assert eager.step_time_s == titan.step_time_s  # torchtitan's own default: compile off
    compiled = estimate(MODEL, CLUSTER, plan, engine=get_engine("torchtitan[compile=true,loss_compile=false]"))
    assert compiled.step_time_s < titan.step_time_s  # fused pointwise ops move fewer bytes
    # eager silu(a) * b saves silu's output too, one bf16 value per token and MLP column in every layer, which
    # the compiled block does not keep; nothing else stored changes
    saved = MODEL.num_layers * plan.micro_batch * titan.plan.seq_len * MODEL.ffn_hidden_size * 2
    assert titan.memory.activations_bytes - compiled.memory.activations_bytes == saved
    for name, value in titan.memory.items():
        if name not in ("activations", "fragmentation"):
            assert value == dict(compiled.memory.items())[name]
