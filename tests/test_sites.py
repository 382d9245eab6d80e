"""Clusters that span sites: a wide-area tier, the bytes that leave a site, their price, and the
low-communication methods over HSDP that keep the traffic inside sites."""

from __future__ import annotations

import pytest

from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import cluster_from_mapping, get_cluster
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.workload.catalog import get_model
from tests.conftest import toy_cluster_mapping

WAN_GB_PER_S = 0.2
EGRESS = 0.05


def two_sites(**wide: object) -> dict:  # type: ignore[type-arg]
    """The toy cluster as two sites of 64 GPUs joined by a priced wide-area tier."""
    raw = toy_cluster_mapping()
    raw["tiers"][1]["span_gpus"] = 64
    raw["tiers"].append({"name": "wan", "span_gpus": 128, "bandwidth_gb_per_s_per_gpu": WAN_GB_PER_S,
                         "latency_us": 0.0, "efficiency": {"value": 1.0, "source": "toy"}, "source": "toy",
                         "wide_area": True, "egress_usd_per_gb": EGRESS, "egress_source": "toy", **wide})
    return raw


@pytest.mark.parametrize("slug", ["h100-2x64-two-regions", "h100-2x64-dci-100g"])
def test_two_site_presets_have_sourced_wide_area_tiers(slug: str) -> None:
    cluster = get_cluster(slug)
    wide = cluster.wide_area_tier
    assert wide is not None and cluster.site_gpus == 64 and cluster.max_gpus == 128
    assert wide.source and wide.egress_source and wide.latency_us >= 1000  # milliseconds between sites
    assert wide.bandwidth_gb_per_s_per_gpu * cluster.site_gpus == pytest.approx(12.5, rel=0.01)  # 100 Gbit/s


def test_bytes_leaving_sites_are_the_hierarchical_all_reduces() -> None:
    """Across S sites an all-reduce is hierarchical: 2 (S-1)/S of the buffer leaves each site (Jia et al. 2018),
    against 2 (g-1)/g for a flat ring. Plans inside one site send nothing out."""
    cluster, model = cluster_from_mapping(two_sites(), "two-sites"), get_model("gpt3-1.3b")
    n = model.total_params()
    pure = estimate(model, cluster, Plan(dp_replicate=128, global_batch=128), engine=get_engine())
    assert pure.egress_bytes_per_step == pytest.approx(2 * (2 * 1 / 2) * 4 * n, rel=1e-9)  # fp32 gradients
    assert estimate(model, cluster, Plan(dp_replicate=64, global_batch=128),
                    engine=get_engine()).egress_bytes_per_step == 0.0
    # HSDP with local SGD: 64 pairs of replicas, one in each site, average their 1/64 shard every 8 steps
    hsdp = estimate(model, cluster, Plan(dp_replicate=2, dp_shard=64, sharding="zero3", global_batch=128,
                                         dp_sync="local_sgd:every=8"), engine=get_engine())
    assert hsdp.egress_bytes_per_step == pytest.approx(64 * 2 * (2 * 1 / 2) * 4 * n / 64 / 8, rel=1e-9)
    # a pipeline of two stages, one per site: every micro-batch's activation out and its gradient back
    piped = estimate(model, cluster, Plan(pp=2, dp_shard=64, sharding="zero1", global_batch=128), engine=get_engine())
    micro_batches = 128 // 64
    activation = 1 * model.seq_len * model.hidden_size * 2  # bf16 [micro_batch, seq, hidden]
    assert piped.egress_bytes_per_step == pytest.approx(64 * 2 * micro_batches * activation, rel=1e-9)


def test_egress_enters_the_dollar_figure_and_the_wide_area_link_the_step() -> None:
    cluster, model = cluster_from_mapping(two_sites(), "two-sites"), get_model("gpt3-1.3b")
    one_site = toy_cluster_mapping()
    one_site["tiers"][1]["span_gpus"] = 128
    plan = Plan(dp_replicate=128, global_batch=128)
    est = estimate(model, cluster, plan, engine=get_engine())
    near = estimate(model, cluster_from_mapping(one_site, "one-site"), plan, engine=get_engine())
    tokens = 1e12
    steps = tokens / est.tokens_per_step
    assert est.cost_usd(tokens) == pytest.approx(est.gpu_hours(tokens) * 2.0 + steps * est.egress_bytes_per_step
                                                 / 1e9 * EGRESS, rel=1e-12)
    assert near.egress_bytes_per_step == 0.0 and near.cost_usd(tokens) == pytest.approx(near.gpu_hours(tokens) * 2.0)
    # hierarchical: B/64 per rank over the 0.2 GB/s share of the link plus an in-site ring at 80 GB/s, about 4x
    # the one-site ring's 2 (127/128) B at 80 GB/s (a node's eight 10 GB/s NICs)
    assert est.time.dp_comm_s > 3 * near.time.dp_comm_s


def test_local_sgd_over_hsdp_sends_less_between_sites_than_the_all_reduce() -> None:
    cluster, model = cluster_from_mapping(two_sites(), "two-sites"), get_model("gpt3-1.3b")
    hsdp = {"dp_replicate": 2, "dp_shard": 64, "sharding": "zero3", "global_batch": 128}
    plain = estimate(model, cluster, Plan(**hsdp), engine=get_engine())
    for every in (4, 16):
        local = estimate(model, cluster, Plan(**hsdp, dp_sync=f"local_sgd:every={every}"), engine=get_engine())
        assert local.egress_bytes_per_step < plain.egress_bytes_per_step / (every / 2)
        assert local.step_time_s < plain.step_time_s and local.time.fsdp_comm_s == plain.time.fsdp_comm_s


def test_tiers_that_charge_egress_must_join_sites_inside_a_site_tier() -> None:
    with pytest.raises(ConfigError, match="egress_usd_per_gb=0.05 needs wide_area = true"):
        cluster_from_mapping(two_sites(wide_area=False), "bad")
    raw = two_sites()
    raw["tiers"][0]["wide_area"] = True
    with pytest.raises(ConfigError, match="joins sites .* but is innermost"):
        cluster_from_mapping(raw, "bad")


def _plan_json(*argv: str) -> dict:  # type: ignore[type-arg]
    import contextlib
    import io
    import json

    from plait.cli.main import run_cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert run_cli(["plan", *argv, "--json"]) == 0
    return json.loads(out.getvalue())  # type: ignore[no-any-return]


@pytest.mark.slow
def test_across_two_regions_the_planner_picks_a_low_communication_method_and_on_one_fabric_the_all_reduce() -> None:
    """The sites figure: `plait plan --model llama3-8b --cluster h100-2x64-two-regions --gpus 128 --json` ranks a
    method that sends less between the regions first, with its multiplier and source (planned for plait's
    runtime, the engine that runs it); on one DGX H100 InfiniBand fabric the all-reduce wins, for Megatron-Core
    (the default engine there) and for plait's runtime alike."""
    two = _plan_json("--model", "llama3-8b", "--cluster", "h100-2x64-two-regions", "--gpus", "128")
    winner = two["top"][0]
    assert two["engine"].startswith("plait") and winner["plan"]["dp_sync"] != "allreduce"
    assert winner["steps_multiplier"] is not None and winner["steps_multiplier_source"]
    assert winner["egress_bytes_per_step"] > 0
    # per-tier compression at FusionLLM's ratio is searched there, against uniform top-k, DiLoCo and the all-reduce
    verdict = two["per_tier"]
    assert verdict.count("site_topk:ratio=0.01") == 1 and verdict.count("topk:ratio=0.01") == 2 and "diloco" in verdict
    for engine in ("megatron-core", "plait"):
        one = _plan_json("--model", "llama3-8b", "--cluster", "dgx-h100-ib", "--gpus", "128", "--engine", engine)
        assert one["top"][0]["plan"]["dp_sync"] == "allreduce", engine
        assert one["per_tier"] is None  # one fabric: nothing to compress per tier


def test_an_all_reduce_across_sites_is_hierarchical() -> None:
    """Reduce-scatter in each site, the shards all-reduced across sites in parallel, all-gather in each site
    (Jia et al. 2018): for 2 sites of 64, B (63/32) over the site's 80 GB/s ring plus B/64 over each GPU's 0.2 GB/s
    share of the link."""
    from plait.cost.collectives import all_reduce_s, group_link

    cluster = cluster_from_mapping(two_sites(), "two-sites")
    link, buffer = group_link(cluster, 128, 1), 1e9
    assert link.sites == 2 and group_link(cluster, 64, 1).sites == 1
    assert all_reduce_s(buffer, link) == pytest.approx(2 * 63 / 64 * buffer / 80e9 + buffer / 64 / (WAN_GB_PER_S * 1e9))


def test_site_topk_ratio_is_fusionllms_bandwidth_rule_rounded_up_to_a_measured_ratio() -> None:
    """The wide-area tier's per-GPU bandwidth over the site fabric's (two regions: 0.1953 of 50 GB/s per GPU, the
    preset's figures); none on one fabric; the planner's ratio is the least one at or above it with a multiplier."""
    from plait.cost.site_sync import adaptive_ratio
    from plait.plan.convergence import convergence
    from plait.search.adaptive import adaptive_specs
    from plait.sync import SiteTopK

    regions = get_cluster("h100-2x64-two-regions")
    assert adaptive_ratio(regions) == pytest.approx(0.1953 / 50.0)
    assert adaptive_ratio(get_cluster("dgx-h100-ib")) is None and adaptive_specs(get_cluster("dgx-h100-ib")) == ()
    assert adaptive_specs(regions)[0] == SiteTopK(ratio=0.01)  # 0.0039 -> the table's topk:ratio=0.01
    assert adaptive_specs(regions, known_ratios=(0.001, 0.002))[0] == SiteTopK(ratio=1.0)  # none at or above: exact
    assert convergence(SiteTopK(ratio=0.01), 64).basis == "measured"  # its own plait converge figure, 2 sites of 2
    assert convergence(SiteTopK(ratio=1.0), 64).basis == "definition"  # every element sent: the all-reduce's
    assert convergence(SiteTopK(ratio=0.02), 64).source.startswith("no figure")  # nor topk's at 0.02


def test_site_topk_sends_its_top_k_across_sites_and_costs_the_same_in_a_batch() -> None:
    """128 whole replicas in two sites of 64: each of the 64 positions all-gathers ``8 ceil(F shard)`` bytes round a
    ring of the 2 sites (each site sends its piece out once), exact inside a site: ``16 F E`` bytes leave per
    replica group against the all-reduce's ``2 (S-1) 4 E = 8 E``, 50 times fewer at F = 0.01. A batch of plans
    (one site, two sites, TP across them) prices each as one plan does, to the bit."""
    import math

    from plait.cost.batch import evaluate_batch
    from plait.plan.columns import PlanColumns
    from plait.workload.tensors import rank_shapes

    cluster, model = cluster_from_mapping(two_sites(), "two-sites"), get_model("gpt3-1.3b")
    elements = sum(math.prod(s) for _, s in rank_shapes(model, 1, 0, model.num_layers, True, True))
    shard = -(-elements // 64)
    got = estimate(model, cluster, Plan(dp_replicate=128, global_batch=128, dp_sync="site_topk:ratio=0.01"),
                   engine=get_engine())
    assert got.egress_bytes_per_step == 64 * 2 * 1 * 8 * math.ceil(0.01 * shard)
    dense = estimate(model, cluster, Plan(dp_replicate=128, global_batch=128), engine=get_engine())
    assert got.egress_bytes_per_step == pytest.approx(dense.egress_bytes_per_step / 50, rel=1e-4)
    plans = [Plan(dp_replicate=64, global_batch=128, dp_sync="site_topk:ratio=0.01"),
             Plan(dp_replicate=128, global_batch=128, dp_sync="site_topk:ratio=0.01"),
             Plan(tp=2, dp_replicate=64, global_batch=128, dp_sync="site_topk:ratio=0.01")]
    framework = get_engine().framework
    batch = evaluate_batch(model, cluster, PlanColumns.from_plans(plans), framework)
    for i, plan in enumerate(plans):
        single = evaluate_batch(model, cluster, PlanColumns.one(plan), framework)
        for name in batch.time:
            assert batch.time[name][i] == single.time[name], name
        assert batch.memory["total"][i] == single.memory["total"]


def test_site_topk_cross_site_seconds_are_two_ring_all_gathers_on_the_wide_area_link() -> None:
    """Toy two sites (no latency, efficiency 1): between two ratios only the cross-site step changes, and it is two
    ring all-gathers (values, indices) over the 2 sites of ``4 k`` bytes a rank: ``2 x (1/2) x 2 x 4 k / B_wan``
    (Patarasuk & Yuan 2009), with ``k = ceil(F shard)`` and the shard ``E / 64``."""
    import math

    from plait.cost.site_sync import site_topk_costs
    from plait.plan.columns import PlanColumns
    from plait.sync import SiteTopK

    cluster = cluster_from_mapping(two_sites(), "two-sites")
    elements, cols = 64 * 10**6, PlanColumns.one(Plan(dp_replicate=128, global_batch=128))
    shard = elements // 64
    sparse, half = (site_topk_costs(cluster, SiteTopK(ratio=r), cols, elements, 1e12)[1] for r in (0.01, 0.5))
    kept = math.ceil(0.5 * shard) - math.ceil(0.01 * shard)
    assert half - sparse == pytest.approx(8 * kept / (WAN_GB_PER_S * 1e9), rel=1e-12)


def test_site_quantize_sends_codes_across_sites_and_32_bits_send_what_the_all_reduce_sends() -> None:
    """128 whole replicas in two sites of 64: each of the 64 positions all-gathers ``ceil(b shard / 8) + 4`` bytes
    (codes and the fp32 scale) round a ring of the 2 sites; at 32 bits the fp32 shard, so ``2 x 64 x 4 E / 64 = 8 E``
    bytes leave, the hierarchical all-reduce's ``2 (S-1) 4 E`` (Jia et al. 2018). Between 4 and 8 bits only the
    ring all-gather of the codes grows: ``(1/2) x 2 x extra / B_wan`` (Patarasuk & Yuan 2009)."""
    import math

    from plait.cost.site_sync import site_costs
    from plait.plan.columns import PlanColumns
    from plait.sync import SiteQuantize
    from plait.workload.tensors import rank_shapes

    cluster, model = cluster_from_mapping(two_sites(), "two-sites"), get_model("gpt3-1.3b")
    elements = sum(math.prod(s) for _, s in rank_shapes(model, 1, 0, model.num_layers, True, True))
    shard = -(-elements // 64)
    plan = {"dp_replicate": 128, "global_batch": 128}
    four = estimate(model, cluster, Plan(**plan, dp_sync="site_quantize:bits=4"), engine=get_engine())
    assert four.egress_bytes_per_step == 64 * 2 * (math.ceil(4 * shard / 8) + 4)
    exact = estimate(model, cluster, Plan(**plan, dp_sync="site_quantize:bits=32"), engine=get_engine())
    dense = estimate(model, cluster, Plan(**plan), engine=get_engine())
    assert exact.egress_bytes_per_step == 64 * 2 * 4 * shard
    assert exact.egress_bytes_per_step == pytest.approx(dense.egress_bytes_per_step, rel=1e-6)  # padding only
    assert four.time.dp_comm_s < exact.time.dp_comm_s
    toy, cols = 64 * 10**6, PlanColumns.one(Plan(**plan))
    low, high = (site_costs(cluster, SiteQuantize(bits=b), cols, toy, 1e12)[1] for b in (4, 8))
    assert high - low == pytest.approx((toy // 64) * (8 - 4) / 8 / (WAN_GB_PER_S * 1e9), rel=1e-12)


def test_the_cross_site_width_is_the_fewest_bits_that_keep_pace_with_the_site_fabric() -> None:
    """``b >= 32 F`` rounded up to a width plait packs (1, 4, 8, 32): two regions (F = 0.0039) -> 1 bit; the planner
    tries each width from there to 8 with a multiplier, beside ``site_topk`` at the table's 0.01."""
    from plait.cost.site_sync import adaptive_bits, bits_for
    from plait.search.adaptive import adaptive_specs
    from plait.sync import SiteQuantize, SiteTopK

    assert [bits_for(f) for f in (1.0, 0.25, 0.2, 0.1, 0.03, 0.0039)] == [32, 8, 8, 4, 1, 1]
    regions = get_cluster("h100-2x64-two-regions")
    assert adaptive_bits(regions) == 1 and adaptive_bits(get_cluster("dgx-h100-ib")) is None
    assert adaptive_specs(regions) == (SiteTopK(ratio=0.01), SiteQuantize(bits=1), SiteQuantize(bits=4),
                                       SiteQuantize(bits=8))
    with pytest.raises(ConfigError, match="bits must be one of 1, 4, 8, 32"):
        Plan(dp_replicate=2, global_batch=2, dp_sync="site_quantize:bits=16")


def test_a_mixed_cluster_joined_by_a_slower_tier_is_planned_with_per_tier_compression() -> None:
    """The shipped mixed presets join their groups at the slower group's own NIC rate: nothing to compress per tier.
    examples/mixed-two-sites.toml joins 64 A100 (25 GB/s per GPU of HDR) and 64 H100 by 0.1953 GB/s per GPU: the
    join's ratio is 0.1953 / 25 (the slower fabric); priced as two sites, compressing only the join beats compressing
    every tier on the same 128 whole replicas, and the verdict weighs both against DiLoCo and the all-reduce. plait run
    refuses such a mixed plan (its groups run as one fabric)."""
    from dataclasses import replace

    from plait.hardware.mixed_catalog import get_mixed_cluster, mixed_cluster
    from plait.plan.mixed import GroupShare, MixedPlan, even_shares, run_refusal
    from plait.predict.mixed_sites import join_ratio
    from plait.search.mixed_split import try_mixed
    from plait.search.mixed_tier import per_tier_mixed

    assert all(join_ratio(get_mixed_cluster(s)) is None for s in ("a100-h100-ib", "h100-b200-ib", "v100-a100-ib"))
    cluster, model, engine = mixed_cluster("examples/mixed-two-sites.toml"), get_model("gpt3-1.3b"), get_engine("plait")
    assert join_ratio(cluster) == pytest.approx(0.1953 / 25.0)

    def mixed(spec: str) -> MixedPlan:
        plan = Plan(dp_replicate=128, global_batch=128, dp_sync=spec, seq_len=model.seq_len)
        return MixedPlan(plan=plan, split="data", shares=even_shares(plan, [
            GroupShare(group=g.name, num_gpus=g.num_gpus) for g in cluster.groups]))

    steps = {s: try_mixed(model, cluster, mixed(s), engine).step_time_s  # type: ignore[union-attr]
             for s in ("allreduce", "site_topk:ratio=0.01", "topk:ratio=0.01", "site_quantize:bits=8",
                       "quantize:bits=8")}
    assert steps["site_topk:ratio=0.01"] < steps["topk:ratio=0.01"] and steps["site_quantize:bits=8"] < steps[
        "quantize:bits=8"] and steps["site_topk:ratio=0.01"] < steps["allreduce"]
    even = try_mixed(model, cluster, mixed("allreduce"), engine)
    verdict = per_tier_mixed(model, cluster, [even], engine, 0.05)  # type: ignore[list-item]
    assert verdict is not None and "site_quantize:bits=8" in verdict and "diloco" in verdict and " wins" in verdict
    assert "quantize:bits=" in verdict.replace("site_quantize:", "") and "allreduce" in verdict  # uniform
    assert "one fabric" in run_refusal(replace(mixed("site_topk:ratio=0.01")))  # type: ignore[operator]
