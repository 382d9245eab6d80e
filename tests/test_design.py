"""Hardware design search (plait.search.design, plait.hardware.variation) and the Kitsune what-if
(plait.cost.kitsune): hand-computed prices and fused regions, invariants on catalog models, the CLI's labels."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from plait.cli.main import run_cli
from plait.cost.kitsune import PassParts, kitsune_what_if
from plait.cost.setup import Setup
from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.hardware.variation import HYPOTHETICAL, Variation, price_factor, vary
from plait.job import Job
from plait.plan.plan import Plan
from plait.predict.estimate import predict
from plait.search.design import (
    DesignRequest,
    Sensitivity,
    cheapest,
    grid,
    parse_values,
    rank,
    search_grid,
    sensitivities,
)
from plait.workload.catalog import resolve_model

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "examples" / "tiny-model.toml")


def test_price_factor_by_hand() -> None:
    # 1 + 0.35 x (2 - 1) + 0.15 x (1.5 - 1) = 1.425, then the price factor itself x2
    shares = {"peak": 0.35, "hbm_bw": 0.15}
    assert price_factor(Variation(factors=(("peak", 2.0), ("hbm_bw", 1.5))), shares) == pytest.approx(1.425)
    assert price_factor(Variation(factors=(("peak", 2.0), ("price", 2.0))), shares) == pytest.approx(2.7)


def test_vary_scales_each_figure_and_labels_it() -> None:
    base = get_cluster("dgx-h100-ib")
    v = Variation(factors=(("peak", 2.0), ("hbm_gib", 1.5), ("hbm_bw", 1.25), ("scale_up_gpus", 2.0),
                           ("scale_up_bw", 3.0), ("scale_out_bw", 0.5)))
    c = vary(base, v, {})
    assert HYPOTHETICAL in c.name and HYPOTHETICAL in c.note and HYPOTHETICAL in c.accelerator.name
    assert c.accelerator.peak_tflops["bf16"] == 2 * base.accelerator.peak_tflops["bf16"]
    assert c.accelerator.memory_gib == 120.0  # 80 GiB x 1.5
    assert c.accelerator.memory_bandwidth_gb_per_s == 1.25 * base.accelerator.memory_bandwidth_gb_per_s
    assert (c.scale_up_domain_gpus, c.tiers[0].span_gpus) == (16, 16)
    assert c.tiers[0].bandwidth_gb_per_s_per_gpu == 1350.0  # 450 GB/s x 3
    assert c.tiers[1].bandwidth_gb_per_s_per_gpu == 25.0  # 50 GB/s x 0.5
    assert c.price_per_gpu_hour_usd == base.price_per_gpu_hour_usd  # no shares: the price stays
    assert vary(base, Variation(factors=()), {}) is base


@pytest.mark.parametrize("text, fragment", [("flops=2", "must be PARAM"), ("peak=0", "must be in [0.001, 1000]"),
                                            ("peak=1e-300", "must be in [0.001, 1000]"), ("peak=x", "must be numbers")])
def test_bad_variations_are_refused(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        parse_values(text)


def test_domain_wider_than_the_next_tier_is_refused() -> None:
    base = get_cluster("h100-roce-400")  # pods of 3,072 GPUs above NVLink domains of 8
    with pytest.raises(ConfigError, match="wider than"):
        vary(base, Variation(factors=(("scale_up_gpus", 512.0),)), {})


def test_design_search_on_a_small_model() -> None:
    base = get_cluster("dgx-h100-ib")
    request = DesignRequest(model=resolve_model("gpt3-1.3b"), base=base, engine=get_engine("megatron-core"), gpus=(8,),
                            global_batches=(64,), tokens=1e9, shares={"peak": 0.35, "hbm_bw": 0.15})
    points = search_grid(request, grid([("peak", (1.0, 2.0))]))
    assert [p.hypothetical for p in points] == [False, True]
    slow, fast = (p.best for p in points)
    assert slow is not None and fast is not None
    assert fast.estimate.step_time_s < slow.estimate.step_time_s  # twice the FLOP/s: faster
    assert fast.estimate.price_per_gpu_hour_usd == pytest.approx(1.35 * slow.estimate.price_per_gpu_hour_usd)
    assert cheapest(points, deadline_days=1e-9) is None
    sens = sensitivities(request, points[0], parameters=("peak", "power"))
    assert {s.parameter for s in sens} == {"peak", "power"}
    power = next(s for s in sens if s.parameter == "power")
    assert power.step_time_change == 0.0 and power.price_change == 0.0  # power changes energy, not time or price
    assert power.energy_change is not None and power.energy_change > 0


def test_sensitivities_rank_step_time_per_price() -> None:
    def sens(name: str, time: float, price: float) -> Sensitivity:
        return Sensitivity(parameter=name, step=1.1, step_time_change=time, price_change=price, cost_change=0.0,
                           energy_change=None, plan_changed=False)

    rows = [sens("dear", -0.05, 0.05), sens("none", 0.0, 0.0), sens("cheap", -0.02, 0.01), sens("free", -0.01, 0.0)]
    assert [s.parameter for s in sorted(rows, key=rank)] == ["free", "cheap", "dear", "none"]  # 1/0, 2, 1, no gain


def test_fused_region_by_hand() -> None:
    # 2 s of compute, 1e12 bytes at 1e12 B/s: 16% saved leaves 0.84 s of traffic, compute-bound: 2 s + 1 ms launch
    part = PassParts(summed_s=3.5, compute_s=2.0, bytes_moved=1e12, launch_s=1e-3)
    assert part.fused_s(0.16, 1e12) == pytest.approx(2.001)
    assert PassParts(summed_s=3.5, compute_s=0.5, bytes_moved=1e12, launch_s=0.0).fused_s(0.42, 1e12) == pytest.approx(0.58)


@pytest.mark.parametrize("model, plan", [
    ("llama3-8b", Plan(dp_shard=8, sharding="zero3", global_batch=64)),
    ("gpt3-1.3b", Plan(dp_replicate=8, micro_batch=4, global_batch=64)),
    (TINY, Plan(micro_batch=8, global_batch=8)),
])
def test_kitsune_never_slower_and_only_compute_shrinks(model: str, plan: Plan) -> None:
    job = Job.build(resolve_model(model), get_cluster("dgx-h100-ib"), plan, get_engine("megatron-core"))
    est = predict(job)
    w = kitsune_what_if(Setup(model=job.model, cluster=job.cluster, plan=job.plan, framework=job.framework), est)
    floor = est.step_time_s - est.time.compute_s - est.time.recompute_s - est.time.pp_bubble_s
    assert floor < w.step_high_saving_s <= w.step_low_saving_s <= est.step_time_s
    assert 0.0 < w.layer_ratio[1] <= w.layer_ratio[0] <= 1.0


def test_what_if_is_a_line_of_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["estimate", "--model", TINY, "--gpus", "1", "--global-batch", "8"]
    assert run_cli(argv) == 0
    assert "WHAT-IF" not in capsys.readouterr().out
    assert run_cli([*argv, "--what-if", "kitsune"]) == 0
    assert "WHAT-IF (not a prediction" in capsys.readouterr().out
    assert run_cli([*argv, "--what-if", "kitsune", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["what_if"]["not_a_prediction"] is True
    assert run_cli([*argv, "--what-if", "nope"]) == 2


def test_design_cli_labels_every_varied_point(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["design", "--model", TINY, "--gpus", "8", "--global-batch", "64", "--tokens", "1e9",
            "--vary", "hbm_bw=1,2", "--no-sensitivity", "--json"]
    assert run_cli(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["hypothetical_hardware"] is True
    assert [(p["hardware"], p["hypothetical"]) for p in out["points"]] == [("base", False), ("hbm_bw x2", True)]
    assert [p["gpus"] for p in out["points"]] == [8, 8]
    assert HYPOTHETICAL in out["points"][1]["cluster"]
    assert run_cli(["design", "--vary", "hbm=2"]) == 2
    assert run_cli(["design", "--price-share", "peak=-1"]) == 2
    assert run_cli(["design", "--gpus", "8,x"]) == 2
    assert run_cli(["design", "--gpus", str(10**9)]) == 2  # more than the cluster holds
