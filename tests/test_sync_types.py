"""Typed synchronization methods (plait.sync): one parser, canonical text, traits, and the per-columns code table."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest

import plait
from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.plan.columns import PlanColumns
from plait.plan.io import plan_to_toml
from plait.plan.plan import Plan
from plait.plan.rules import RULES, broken_rule_index, first_violation
from plait.search.space import default_space
from plait.sync import ALLREDUCE, METHODS, LocalSGD, ParamServer, PowerSGD, SyncMethod, parse
from plait.workload.catalog import get_model

EXAMPLES = ["allreduce", "bf16", "fp16", "powersgd:rank=4", "topk:ratio=0.01", "site_topk:ratio=0.01", "site_quantize:bits=4", "quantize:bits=4",
            "local_sgd:every=8",
            "diloco:every=500", "palsgd:every=4,warmup=3", "dreamddp:every=3", "pipe_sgd", "param_server:host=cpu",
            "switch_aggregation:bits=16", "gossip:topology=random,peers=3", "async_ps:staleness=2",
            "easgd:alpha=0.5,every=3", "crossbow:learners=2,alpha=0.25"]


def test_every_method_reads_back_its_own_spec_and_compares_by_value() -> None:
    assert sorted(parse(text).name for text in EXAMPLES) == sorted(METHODS)
    assert all(cls.name == name for name, cls in METHODS.items())  # the registry's table names each class's own
    for text in EXAMPLES:
        method = parse(text)
        again = parse(method.spec)
        assert again == method and hash(again) == hash(method) and again.spec == method.spec
    assert parse("powersgd:rank=4") == PowerSGD(rank=4) != parse("powersgd:rank=5")
    assert parse("bf16") != parse("fp16") and parse("allreduce") is not ALLREDUCE and parse("allreduce") == ALLREDUCE


def test_traits_are_the_documented_groups() -> None:
    def named(trait: str) -> set[str]:
        return {t.partition(":")[0] for t in EXAMPLES if getattr(parse(t), trait)}

    assert named("compressed") == {"bf16", "fp16", "powersgd", "topk", "site_topk", "site_quantize", "quantize"}
    assert named("infrequent") == {"local_sgd", "diloco", "palsgd", "dreamddp", "gossip", "crossbow"}
    assert named("whole_learners") == {"crossbow"}
    assert named("asynchronous") == {"async_ps", "easgd"}
    assert named("aggregating") == {"param_server", "switch_aggregation"}
    assert named("whole_gradients") == {"bf16", "fp16", "powersgd", "topk", "site_topk", "site_quantize", "quantize", "pipe_sgd",
                                        "param_server", "switch_aggregation", "async_ps", "easgd"}
    assert {t.partition(":")[0]: parse(t).server_ranks for t in EXAMPLES if parse(t).server_ranks} == {
        "param_server": 1, "async_ps": 1, "easgd": 1}
    assert named("partial_averaging") == {"dreamddp"} and named("in_network") == {"switch_aggregation"}
    assert named("group_local_steps") == {"local_sgd"} and named("one_bucket") == {"powersgd", "site_topk", "site_quantize"}
    assert named("servers_hold_model") == {"async_ps"} and named("point_to_point") == {
        "param_server", "switch_aggregation", "gossip", "async_ps", "easgd"}
    assert {t.partition(":")[0] for t in EXAMPLES if parse(t).collective == "all_gather"} == {"topk", "quantize"}
    assert [parse(t).graph() for t in EXAMPLES if parse(t).graph()] == [("random", 3)]
    assert named("site_aware") == {"site_topk", "site_quantize"}


def test_parameter_server_rules_read_the_methods_own_answers() -> None:
    """Servers on the replicas: at most one per replica; on CPU machines: any number; hybrid factors need servers on
    the replicas and whole layers (tp = pp = 1); a single plan and a batch of the same plans agree."""
    model, cluster = get_model("llama3-8b"), get_cluster("dgx-h100-ib")
    cases = {"param_server:servers=4": None, "param_server:servers=5": "dp-sync-servers-within-replicas",
             "param_server:servers=5,host=cpu": None, "param_server:servers=2,hybrid=true": None,
             "param_server:servers=2,host=cpu,hybrid=true": "dp-sync-hybrid-whole-layers"}
    plans = [Plan(dp_replicate=4, global_batch=16, dp_sync=spec) for spec in cases]
    found = [first_violation(p, model, cluster) for p in plans]
    assert [f and f[0] for f in found] == list(cases.values())
    batch = broken_rule_index(PlanColumns.from_plans(plans), model, cluster)
    assert [RULES[i].name if i >= 0 else None for i in batch] == list(cases.values())
    split = Plan(tp=2, dp_replicate=4, global_batch=16, dp_sync="param_server:servers=2,hybrid=true")
    assert first_violation(split, model, cluster)[0] == "dp-sync-hybrid-whole-layers"  # type: ignore[index]


def test_choices_are_named_values_not_codes() -> None:
    servers = parse("param_server:placement=layerwise,hybrid=true,servers=2")
    assert isinstance(servers, ParamServer)
    assert (servers.placement, servers.host, servers.hybrid, servers.servers) == ("layerwise", "ranks", True, 2)
    assert servers.spec == "param_server:servers=2,placement=layerwise,host=ranks,hybrid=true"
    with pytest.raises(ConfigError, match="hybrid='yes' must be one of false, true"):
        parse("param_server:hybrid=yes")


def test_a_plan_holds_the_parsed_method_and_writes_its_text() -> None:
    plan = Plan(dp_replicate=2, global_batch=8, dp_sync="local_sgd:every=8")
    assert plan.dp_sync == LocalSGD(every=8) and plan == Plan(dp_replicate=2, global_batch=8, dp_sync=LocalSGD(every=8))
    assert 'dp_sync = "local_sgd:every=8"' in plan_to_toml(plan)
    assert plan.describe().endswith("sync=local_sgd:every=8") and plan.to_dict()["dp_sync"] == "local_sgd:every=8"
    with pytest.raises(ConfigError, match="must be a string METHOD"):
        Plan(dp_sync=3)  # type: ignore[arg-type]


def test_plan_columns_carry_their_own_method_table() -> None:
    plans = [Plan(dp_replicate=2, global_batch=8, dp_sync=s) for s in ("diloco:every=5", "allreduce", "bf16")]
    cols = PlanColumns.from_plans(plans)
    assert cols.methods[0] == ALLREDUCE and [cols.plan(i) for i in range(3)] == plans
    assert list(cols.take([2, 0]).sync_rows(lambda s: s.compressed)) == [True, False]
    other = PlanColumns.from_plans([plans[2]])
    assert other.methods == (ALLREDUCE, parse("bf16")) and other.plan(0) == plans[2]


def test_a_search_space_owns_its_table_across_processes() -> None:
    space = default_space(get_model("llama3-8b"), get_cluster("dgx-h100-ib"), 16, (64,),
                          dp_syncs=("allreduce", "powersgd:rank=4"), param_servers=True)
    assert space.methods[:2] == (ALLREDUCE, PowerSGD(rank=4))
    assert ParamServer(servers=16, hybrid=True) in space.methods
    assert pickle.loads(pickle.dumps(space)).methods == space.methods


def test_a_method_built_in_code_is_checked_as_strictly_as_one_parsed() -> None:
    """Bounds and rules hold for methods built without text too, stated as one would write them."""
    with pytest.raises(ConfigError, match=r"dp_sync='local_sgd:every=3000000000': every=3000000000 must be a whole"):
        LocalSGD(every=3_000_000_000)
    with pytest.raises(ConfigError, match=r"dp_sync='param_server:placement='?x'?': placement='x' must be one of"):
        ParamServer(placement="x")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"dp_sync='gossip:peers=3': peers applies to topology=exponential"):
        parse("gossip:peers=3")


def _families(cls: type[SyncMethod]) -> set[str]:
    """Names of every subclass of ``cls``, at any depth."""
    return {name for sub in cls.__subclasses__() for name in {sub.__name__} | _families(sub)}


def test_no_module_outside_the_methods_asks_a_methods_class() -> None:
    """Each method answers for itself (plait.sync.hooks): outside plait/sync, no isinstance names a method family
    imported from plait.sync (``from plait.sync import X`` or ``plait.sync`` as a module alias)."""
    families, src = _families(SyncMethod), Path(plait.__file__).parent
    found = []
    for path in sorted(src.rglob("*.py")):
        if "sync" in path.relative_to(src).parts[:1]:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                    and (n.module or "").startswith("plait.sync") for a in n.names}
        aliases = {a.asname for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "plait"
                   for a in n.names if a.name == "sync" and a.asname} | {"sync"} & imported
        for call in ast.walk(tree):
            if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "isinstance"):
                continue
            for node in ast.walk(call.args[1]):
                named = (node.id in imported if isinstance(node, ast.Name) else isinstance(node, ast.Attribute)
                         and isinstance(node.value, ast.Name) and node.value.id in aliases)
                name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
                if named and name in families:
                    found.append(f"{path.relative_to(src)}:{call.lineno} {name}")
    assert found == []
