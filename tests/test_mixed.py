"""Mixed clusters and plans: a mixed cluster of one kind is the homogeneous cluster, the slowest group
sets a mixed step, memory is checked per device type, and the planner's balanced split beats the even one."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.hardware.mixed import DeviceGroup, MixedCluster, slowed
from plait.hardware.mixed_catalog import get_mixed_cluster, mixed_from_mapping, resolve_any_cluster
from plait.job import Job
from plait.plan.mixed import GroupShare, MixedPlan
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.predict.mixed import estimate_mixed, mixed_layout
from plait.predict.mixed_result import MixedEstimate
from plait.simulate.costs import pipeline_costs
from plait.workload.catalog import get_model
from plait.workload.model import ModelSpec
from tests.inprocess import cli

MODEL = get_model("llama3-8b")
FSDP = Plan(dp_shard=128, sharding="zero3", micro_batch=1, global_batch=512)
ENGINE = get_engine()


def _estimate(cluster: MixedCluster, mixed: MixedPlan, model: ModelSpec = MODEL) -> MixedEstimate:
    """``mixed`` as a mixed plan enters the estimator: its layout's sequence length filled (``mixed_layout``)."""
    return estimate_mixed(model, cluster, replace(mixed, plan=mixed_layout(model, mixed.plan)), engine=ENGINE)


def _two(cluster: str, gpus: int, join_from: str) -> MixedCluster:
    """Two groups of ``cluster`` joined by ``join_from``'s outermost tier."""
    c = get_cluster(cluster)
    join = replace(get_cluster(join_from).tiers[-1], span_gpus=2 * gpus)
    return MixedCluster(name="two", groups=(DeviceGroup(name="x", cluster=c, num_gpus=gpus),
                                            DeviceGroup(name="y", cluster=c, num_gpus=gpus)),
                        join=join, source="test")


def _data(plan: Plan, *batches: tuple[str, int, int]) -> MixedPlan:
    return MixedPlan(plan=plan, split="data",
                     shares=tuple(GroupShare(group=g, num_gpus=n, batch=b) for g, n, b in batches))


def test_one_group_is_the_homogeneous_cluster_exactly() -> None:
    c = get_cluster("dgx-h100-ib")
    mixed = MixedCluster(name="one", groups=(DeviceGroup(name="h100", cluster=c, num_gpus=128),),
                         join=c.tiers[-1], source="test")
    est = _estimate(mixed, _data(FSDP, ("h100", 128, 512)))
    ref = estimate(MODEL, c, FSDP, engine=ENGINE)
    assert est.step_time_s == ref.step_time_s
    assert est.groups[0].memory_bytes == ref.memory.total_bytes
    assert est.tokens_per_s == ref.tokens_per_s


def test_a_mixed_layout_takes_the_model_sequence_length_where_it_enters() -> None:
    """A layout that leaves the sequence length 0 takes the model's, once, where the mixed plan enters; a stated
    one is kept."""
    assert FSDP.seq_len == 0 and mixed_layout(MODEL, FSDP).seq_len == MODEL.seq_len
    assert mixed_layout(MODEL, replace(FSDP, seq_len=1024)).seq_len == 1024


@pytest.mark.parametrize("plan", [FSDP, Plan(tp=8, dp_shard=16, sharding="zero1", sp=True, global_batch=512),
                                  Plan(pp=4, dp_shard=32, sharding="zero1", global_batch=512)])
def test_two_groups_of_one_kind_on_its_fabric_equal_the_homogeneous_estimate(plan: Plan) -> None:
    mixed = _two("dgx-h100-ib", 64, "dgx-h100-ib")
    ref = estimate(MODEL, get_cluster("dgx-h100-ib"), plan, engine=ENGINE)
    if plan.pp == 1:
        est = _estimate(mixed, _data(plan, ("x", 64, 256), ("y", 64, 256)))
        assert est.step_time_s == ref.step_time_s
    else:  # a pipeline split of even layers is the homogeneous pipeline, simulated
        shares = (GroupShare(group="x", num_gpus=64, layers=(8, 8)), GroupShare(group="y", num_gpus=64, layers=(8, 8)))
        est = _estimate(mixed, MixedPlan(plan=plan, split="pipeline", shares=shares))
        assert est.step_time_s == pytest.approx(estimate(MODEL, get_cluster("dgx-h100-ib"), plan,
                                                         simulate=True, engine=ENGINE).step_time_s, rel=1e-12)


def test_a_slow_group_on_the_critical_path_sets_the_step() -> None:
    """Even batches on A100 + H100: the step is the all-A100 job's (dgx-a100-ib's HDR fabric is the join's rate),
    and the H100s idle for the difference."""
    mixed = get_mixed_cluster("a100-h100-ib")
    est = _estimate(mixed, _data(FSDP, ("a100", 64, 256), ("h100", 64, 256)))
    all_a100 = estimate(MODEL, get_cluster("dgx-a100-ib"), FSDP, engine=ENGINE)
    assert est.step_time_s == pytest.approx(all_a100.step_time_s, rel=1e-12)
    a100, h100 = est.groups
    assert est.critical is a100 and a100.idle_s == 0.0
    assert h100.idle_s > 0.4 * est.step_time_s  # H100 bf16 peak is 3.2x A100's: most of its step is waiting


def test_a_slow_pipeline_stage_sets_the_steady_state() -> None:
    mixed, plan = get_mixed_cluster("a100-h100-ib"), Plan(pp=4, dp_shard=32, sharding="zero1", global_batch=512)
    shares = (GroupShare(group="a100", num_gpus=64, layers=(8, 8)), GroupShare(group="h100", num_gpus=64, layers=(8, 8)))
    est = _estimate(mixed, MixedPlan(plan=plan, split="pipeline", shares=shares))
    a100 = estimate(MODEL, get_cluster("dgx-a100-ib"), plan, simulate=True, engine=ENGINE)
    h100 = estimate(MODEL, get_cluster("dgx-h100-ib"), plan, simulate=True, engine=ENGINE)
    assert h100.step_time_s < est.step_time_s <= a100.step_time_s * (1 + 1e-9)
    slowest = max(est.groups, key=lambda g: g.busy_s)
    all_a100 = Job.build(MODEL, get_cluster("dgx-a100-ib"), plan, get_engine())
    stages = pipeline_costs(all_a100)  # the all-A100 pipeline's first stage
    assert slowest is est.groups[0] and slowest.group == "a100"
    assert est.time.compute_s == pytest.approx(stages.m * (stages.forward_s[0] + stages.backward_s[0]), rel=1e-12)


def test_balancing_moves_batch_to_the_fast_group_and_beats_the_even_split() -> None:
    from plait.search.mixed_split import balance_data

    mixed = get_mixed_cluster("a100-h100-ib")
    even = _estimate(mixed, _data(FSDP, ("a100", 64, 256), ("h100", 64, 256)))
    best = balance_data(MODEL, mixed, even, ENGINE, 64)
    a100, h100 = best.plan.shares
    assert h100.batch > a100.batch and a100.batch + h100.batch == 512
    assert best.tokens_per_s > 1.3 * even.tokens_per_s
    assert max(g.idle_s for g in best.groups) < max(g.idle_s for g in even.groups)


def test_memory_is_checked_per_device_type() -> None:
    """ZeRO-1 with full recomputation keeps bf16 weights and fp32 gradients of 8B parameters on every GPU: 48 GB
    and a layer's activations fit an A100 80GB, not a V100 32GB."""
    mixed = get_mixed_cluster("v100-a100-ib")
    plan = Plan(dp_shard=128, sharding="zero1", recompute="full", global_batch=512)
    est = _estimate(mixed, _data(plan, ("v100", 64, 256), ("a100", 64, 256)))
    v100, a100 = est.groups
    assert not v100.fits and a100.fits and not est.fits
    assert v100.memory_bytes > 8e9 * (2 + 4)


def test_local_sgd_groups_take_their_own_local_steps() -> None:
    mixed = get_mixed_cluster("a100-h100-ib")
    plan = Plan(dp_replicate=128, global_batch=512, dp_sync="local_sgd:every=2", micro_batch=1)
    shares = (GroupShare(group="a100", num_gpus=64, batch=256, local_steps=2),
              GroupShare(group="h100", num_gpus=64, batch=256, local_steps=6))
    est = _estimate(mixed, MixedPlan(plan=plan, split="data", shares=shares))
    assert est.tokens_per_step == (2 * 256 + 6 * 256) * MODEL.seq_len
    assert est.step_time_s == pytest.approx(max(g.busy_s for g in est.groups))
    with pytest.raises(ConfigError, match="local_steps .* only with dp_sync local_sgd"):
        _estimate(mixed, MixedPlan(plan=replace(plan, dp_sync="allreduce"), split="data", shares=shares))


def test_slowed_device_is_slower_by_the_factor() -> None:
    c, plan = get_cluster("dgx-h100-ib"), Plan(tp=8, sp=True, global_batch=8)
    fast, slow = estimate(MODEL, c, plan, engine=ENGINE), estimate(MODEL, slowed(c, 3.0), plan, engine=ENGINE)
    assert slow.time.compute_s == pytest.approx(3.0 * fast.time.compute_s, rel=1e-9)
    assert slow.memory.total_bytes == fast.memory.total_bytes
    with pytest.raises(ConfigError, match="factor=0.5 must be >= 1"):
        slowed(c, 0.5)


@pytest.mark.parametrize(("shares", "message"), [
    ((("a100", 64, 256), ("h100", 64, 128)), "batches sum to 384 but global_batch=512"),
    ((("a100", 64, 256), ("b200", 64, 256)), "group 'b200' is not in"),
    ((("a100", 64, 100), ("h100", 64, 412)), "batch=100 must be a positive multiple of replicas x micro_batch = 64"),
    ((("a100", 128, 512),), "the plan uses 128 GPUs but"),
])
def test_bad_shares_are_refused_by_name(shares: tuple, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _estimate(get_mixed_cluster("a100-h100-ib"), _data(FSDP, *shares))


def test_a_mixed_cluster_file_names_presets_and_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "mixed.toml"
    path.write_text('name = "mine"\nsource = "test"\n[[groups]]\nname = "h"\ncluster = "dgx-h100-ib"\nnum_gpus = 8\n'
                    '[[groups]]\nname = "a"\ncluster = "dgx-a100-ib"\nnum_gpus = 8\n[join]\nname = "ib"\n'
                    'span_gpus = 16\nbandwidth_gb_per_s_per_gpu = 25.0\nlatency_us = 5.0\n'
                    'efficiency = { value = 0.9, source = "assumed: test" }\nsource = "test"\n')
    mixed = resolve_any_cluster(str(path))
    assert isinstance(mixed, MixedCluster) and mixed.num_gpus == 16
    with pytest.raises(ConfigError, match="num_gpus=4 must be a positive multiple of gpus_per_node=8"):
        mixed_from_mapping({"groups": [{"name": "h", "cluster": "dgx-h100-ib", "num_gpus": 4}],
                            "join": {}, "source": "x"}, "t")


def test_cli_lists_estimates_and_plans_mixed_clusters() -> None:
    code, out, _ = cli(["clusters", "--json"])
    assert code == 0 and {m["slug"] for m in json.loads(out)["mixed_clusters"]} >= {"a100-h100-ib", "h100-b200-ib"}
    code, out, _ = cli(["estimate", "--cluster", "a100-h100-ib", "--global-batch", "512", "--json"])
    body = json.loads(out)
    assert code == 0 and body["num_gpus"] == 128 and {g["group"] for g in body["groups"]} == {"a100", "h100"}
    code, out, _ = cli(["plan", "--cluster", "h100-b200-ib", "--global-batch", "512", "--json"])
    body = json.loads(out)
    assert code == 0 and body["plans"][0]["tokens_per_s"] > body["even"]["tokens_per_s"]
    assert set(body["baselines"]) == {"h100", "b200"}


@pytest.mark.parametrize(("argv", "message"), [
    (["estimate", "--shares", "a=1"], "--split, --shares and --local-steps share a plan"),
    (["estimate", "--cluster", "a100-h100-ib", "--gpus", "64"], "--gpus 64: a plan on a mixed cluster uses"),
    (["estimate", "--cluster", "a100-h100-ib", "--shares", "a100=x"], "a100 batch='x' must be an integer"),
    (["estimate", "--cluster", "a100-h100-ib", "--split", "pipeline"], "a pipeline split needs pp"),
    (["plan", "--cluster", "a100-h100-ib", "--objective", "cost"], "a mixed cluster is planned for throughput"),
])
def test_cli_refuses_mixed_mistakes_in_one_line(argv: list[str], message: str) -> None:
    code, _, err = cli(argv)
    assert code == 2 and message in err and "Traceback" not in err


def test_planner_local_sgd_gives_the_fast_group_more_local_steps_with_a_measured_multiplier() -> None:
    """000-17: with one HSDP replica per group (two averaging replicas, the setting plait converge measured),
    the H100s take more local steps than the A100s; no plan with an unmeasured multiplier is ranked."""
    from plait.search.mixed_local import local_sgd_plans

    mixed, model = get_mixed_cluster("a100-h100-ib"), get_model("gpt3-1.3b")
    plan = Plan(dp_shard=128, sharding="zero1", micro_batch=2, global_batch=512)
    even = _estimate(mixed, _data(plan, ("a100", 64, 256), ("h100", 64, 256)), model=model)
    plans = local_sgd_plans(model, mixed, even, ENGINE)
    assert plans and all(e.steps_multiplier_known and e.plan.plan.dp_replicate == 2 for e in plans)
    assert any(e.plan.shares[1].local_steps > e.plan.shares[0].local_steps for e in plans)
    for e in plans:
        a100, h100 = e.plan.shares
        assert h100.local_steps >= a100.local_steps  # equal only at the longest measured period
        assert e.tokens_per_step == (a100.local_steps + h100.local_steps) * 256 * model.seq_len
        assert e.steps_multiplier > 1.0


def test_cpu_workers_in_a_synchronous_step_set_its_pace() -> None:
    """Hogbatch (001-20) lets CPU workers join GPUs asynchronously because in a synchronous step the CPUs set the
    pace: balancing leaves this machine's two CPU ranks (examples/cpu-node.toml, measured) one micro-batch each, and
    the H100s alone still beat the mixed job."""
    from plait.search.mixed import plan_mixed

    mixed, model = resolve_any_cluster("examples/mixed-gpu-cpu.toml"), get_model("gpt3-125m")
    assert isinstance(mixed, MixedCluster)
    result = plan_mixed(model, mixed, 80, local_sgd=False, asynchronous=False, engine=ENGINE)
    best = result.plans[0]
    cpu = next(s for s in best.plan.shares if s.group == "cpu")
    assert cpu.batch == 2 * best.plan.plan.micro_batch  # one micro-batch per CPU rank: the least a rank can run
    assert best.critical.group == "cpu"
    name, alone = result.best_baseline
    assert name == "h100" and alone.tokens_per_s > 10 * best.tokens_per_s


@given(st.lists(st.integers(1, 16), min_size=1, max_size=4), st.integers(1, 4), st.integers(1, 4096))
@settings(max_examples=200, deadline=None)
def test_an_even_split_sums_to_the_global_batch_in_whole_micro_batches(replicas: list[int], micro: int,
                                                                       batch: int) -> None:
    """Every group's batch is whole micro-batches on each of its replicas and the batches sum to the global batch;
    a global batch no such split reaches is refused in one line."""
    from plait.plan.mixed import even_shares

    dp = sum(replicas)
    layout = Plan(dp_shard=dp, sharding="zero3", micro_batch=micro, global_batch=max(batch, dp * micro))
    shares = [GroupShare(group=f"g{i}", num_gpus=r) for i, r in enumerate(replicas)]
    try:
        split = even_shares(layout, shares)
    except ConfigError as exc:
        assert "cannot be split into whole micro-batches" in str(exc)
        reachable = {0}  # sums of at least one whole unit per group, by brute force
        for r in replicas:
            reachable = {t + k * r * micro for t in reachable for k in range(1, layout.global_batch // (r * micro) + 1)
                         if t + k * r * micro <= layout.global_batch}
        assert layout.global_batch not in reachable
        return
    assert sum(s.batch for s in split) == layout.global_batch
    assert all(s.batch > 0 and s.batch % (r * micro) == 0 for s, r in zip(split, replicas, strict=True))


def test_a_global_batch_that_replicas_do_not_divide_is_split_and_balanced() -> None:
    """Ten replicas (8 H100, 2 CPU ranks) and 64 sequences: the even split rounds to whole micro-batches, and
    balancing moves work off the CPU ranks in steps both groups can take (8 sequences: 1 per H100, 4 per CPU)."""
    code, out, err = cli(["estimate", "--cluster", "examples/mixed-gpu-cpu.toml", "--model", "gpt3-125m",
                          "--global-batch", "64", "--json"])
    assert code == 0, err
    batches = {g["group"]: int(g["work"].removeprefix("b")) for g in json.loads(out)["groups"]}
    assert sum(batches.values()) == 64 and batches["h100"] % 8 == 0 and batches["cpu"] % 2 == 0
    assert batches["cpu"] < 64 * 2 / 10  # less than the CPU ranks' even share: they are the slow group
