"""Energy per step from per-state power (plait.cost.energy, plait.hardware.power_states, power.toml): hand-computed
toy steps, the sourced figures as the catalog reads them, batch = single, the estimate's and the planner's use."""

from __future__ import annotations

import json
from dataclasses import fields

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plait.cost.energy import STATE_OF, step_energy, step_energy_batch
from plait.cost.estimate import TimeBreakdown
from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster, load_cluster_file
from plait.hardware.figure import Figure
from plait.hardware.power_states import PowerStates, default_power
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.search.pareto import Point, choose
from plait.workload.catalog import get_model


def _states(busy: float, comm: float, idle: float, host: float, net: float, pue: float) -> PowerStates:
    given = dict(busy_w=busy, communicating_w=comm, idle_w=idle, host_w_per_gpu=host, network_w_per_gpu=net, pue=pue)
    return PowerStates(**{k: Figure(value=v, source="assumed: test") for k, v in given.items()})


TOY = _states(700.0, 350.0, 100.0, 300.0, 50.0, 1.1)


def test_every_step_component_has_a_device_state() -> None:
    assert set(STATE_OF) == {f.name for f in fields(TimeBreakdown)}


def test_toy_step_by_hand() -> None:
    # 1 s computing, 0.5 s exposed TP collectives, 0.25 s pipeline bubble on 8 GPUs:
    # boards 8 x (700 x 1 + 350 x 0.5 + 100 x 0.25) = 8 x 900 = 7,200 J; hosts 8 x 300 x 1.75 = 4,200 J;
    # network 8 x 50 x 1.75 = 700 J; IT 12,100 J; x PUE 1.1 = 13,310 J
    time = TimeBreakdown(compute_s=1.0, tp_comm_s=0.5, pp_bubble_s=0.25)
    energy = step_energy(time, 8, TOY)
    assert (energy.busy_s, energy.communicating_s, energy.idle_s) == (1.0, 0.5, 0.25)
    assert energy.gpu_j == pytest.approx(7200.0)
    assert energy.host_j == pytest.approx(4200.0)
    assert energy.network_j == pytest.approx(700.0)
    assert energy.total_j == pytest.approx(13310.0)


@pytest.mark.parametrize("component, state_w", [("compute_s", 700.0), ("optimizer_s", 700.0), ("dp_comm_s", 350.0),
                                                ("fsdp_comm_s", 350.0), ("pp_bubble_s", 100.0), ("host_s", 100.0)])
def test_one_more_second_in_a_state_costs_its_power(component: str, state_w: float) -> None:
    # a second more of one component adds (state + host + network) W x GPUs x PUE: e.g. (700 + 300 + 50) x 4 x 1.1
    base = step_energy(TimeBreakdown(compute_s=2.0), 4, TOY).total_j
    more = step_energy(TimeBreakdown(**{"compute_s": 2.0, component: (2.0 if component == "compute_s" else 0.0) + 1.0}),
                       4, TOY).total_j
    assert more - base == pytest.approx((state_w + 350.0) * 4 * 1.1)


SECONDS = st.floats(min_value=0.0, max_value=100.0, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(busy=SECONDS, comm=SECONDS, idle=SECONDS, gpus=st.integers(min_value=1, max_value=4096))
def test_energy_lies_between_the_idle_and_the_busy_draw_and_scales_with_gpus(busy: float, comm: float, idle: float,
                                                                         gpus: int) -> None:
    # every state draws between the idle and the busy power, so the step's energy lies between the whole step at
    # either; twice the GPUs in the same states draw twice the energy
    time = TimeBreakdown(compute_s=busy, dp_comm_s=comm, pp_bubble_s=idle)
    energy = step_energy(time, gpus, TOY).total_j
    step = busy + comm + idle
    low, high = (gpus * 1.1 * (w + 350.0) * step for w in (100.0, 700.0))
    assert low * (1 - 1e-12) <= energy <= high * (1 + 1e-12)
    assert step_energy(time, 2 * gpus, TOY).total_j == pytest.approx(2 * energy)


def test_batch_equals_single() -> None:
    rng = np.random.default_rng(0)
    names = [f.name.removesuffix("_s") for f in fields(TimeBreakdown) if f.name != "input_wait_s"]
    arrays = {n: rng.uniform(0.0, 2.0, 5) for n in names}
    batch = step_energy_batch(arrays, 16, TOY)
    for row in range(5):
        time = TimeBreakdown(**{f"{n}_s": float(arrays[n][row]) for n in names})
        assert batch[row] == pytest.approx(step_energy(time, 16, TOY).total_j, rel=1e-12)


def test_h100_states_from_the_sourced_figures() -> None:
    # power.toml: busy 1.0, communicating 0.35, idle 0.15 of the 700 W H100 SXM rating (accelerators.toml);
    # host: Latif et al. 2024 measured 8.4 kW at most on an 8x H100 node: (8,400 - 8 x 700) / 8 = 350 W per GPU
    power = get_cluster("dgx-h100-ib").power
    assert power is not None
    assert (power.busy_w.value, power.communicating_w.value, power.idle_w.value) == pytest.approx((700.0, 245.0, 105.0))
    assert power.host_w_per_gpu.value == pytest.approx((8400.0 - 8 * 700.0) / 8)
    assert power.pue.value == pytest.approx(1.10)  # Google's fleet-wide PUE
    assert all(getattr(power, f.name).source.strip() for f in fields(PowerStates))


def test_a_power_limit_caps_the_busy_draw_only() -> None:
    # Llama 3's Grand Teton H100 held to 500 W (clusters.toml): busy 500 W; waiting states as for the 700 W rating
    power = get_cluster("h100-grandteton-roce").power
    assert power is not None
    assert (power.busy_w.value, power.communicating_w.value, power.idle_w.value) == pytest.approx((500.0, 245.0, 105.0))
    assert default_power(0.0) is None  # a calibrated machine states no rating: no energy


def test_a_cluster_file_states_its_own_power(tmp_path) -> None:
    text = """name = "one node"
accelerator = "a100-80gb"
gpus_per_node = 8
scale_up_domain_gpus = 8
price_per_gpu_hour_usd = 1.0
price_source = "assumed: test"
host_memory_gib_per_gpu = 128.0
host_memory_bandwidth_gb_per_s_per_gpu = 50.0
host_memory_bandwidth_source = "assumed: test"
source = "assumed: test"
[[tiers]]
name = "nvlink"
span_gpus = 8
bandwidth_gb_per_s_per_gpu = 300.0
latency_us = 3.0
efficiency = { value = 0.8, source = "assumed: test" }
source = "assumed: test"
[power]
busy_w = { value = 400.0, source = "assumed: test" }
communicating_w = { value = 150.0, source = "assumed: test" }
idle_w = { value = 60.0, source = "assumed: test" }
host_w_per_gpu = { value = 0.0, source = "assumed: test" }
network_w_per_gpu = { value = 0.0, source = "assumed: test" }
pue = { value = PUE, source = "assumed: test" }
"""
    path = tmp_path / "c.toml"
    path.write_text(text.replace("PUE", "1.0"))
    cluster = load_cluster_file(path)
    assert cluster.power is not None and cluster.power.busy_w.value == 400.0
    est = estimate(get_model("llama3-8b"), cluster, Plan(dp_shard=8, sharding="zero3", global_batch=8, seq_len=2048), engine=get_engine())
    energy = est.energy_per_step
    assert energy is not None
    t = est.time  # 400 W busy, 150 W communicating, 60 W idle, nothing else, PUE 1
    by_hand = 8 * (400.0 * (t.compute_s + t.recompute_s + t.optimizer_s)
                   + 150.0 * (t.tp_comm_s + t.cp_comm_s + t.ep_comm_s + t.pp_p2p_s + t.fsdp_comm_s + t.swap_s
                              + t.dp_comm_s) + 60.0 * (t.host_s + t.pp_bubble_s + t.input_wait_s))
    assert energy.total_j == pytest.approx(by_hand)
    assert est.energy_j(3 * est.tokens_per_step) == pytest.approx(3 * by_hand)
    path.write_text(text.replace("PUE", "0.9"))
    with pytest.raises(ConfigError, match=r"pue=0.9 must be in \[1, 5\]"):
        load_cluster_file(path)


@pytest.mark.parametrize("field, value, rule", [
    ("pue", 1e30, r"power.pue=1e\+30 must be in \[1, 5\]"), ("pue", float("nan"), r"power.pue=nan must be in"),
    ("busy_w", 1e30, r"power.busy_w=1e\+30 must be in \[0, 10,000\] watts"),
    ("idle_w", -1.0, r"power.idle_w=-1.0 must be in \[0, 10,000\] watts"),
    ("host_w_per_gpu", float("nan"), "power.host_w_per_gpu=nan must be in")])
def test_power_figures_out_of_bounds_are_refused(field: str, value: float, rule: str) -> None:
    # a PUE of 1e30 or a GPU drawing 1e30 W is a typing mistake, and NaN compares false with every bound
    given = dict(busy=700.0, comm=350.0, idle=100.0, host=300.0, net=50.0, pue=1.1)
    given[{"pue": "pue", "busy_w": "busy", "idle_w": "idle", "host_w_per_gpu": "host"}[field]] = value
    with pytest.raises(ConfigError, match=rule):
        _states(**given)


def _point(gpus: int, days: float, dollars: float, energy_j: float) -> Point:
    return Point(gpus, None, days, dollars, energy_j)  # type: ignore[arg-type]


def test_the_energy_objective_chooses_the_least_energy_within_the_limits() -> None:
    points = [_point(8, 100.0, 1e5, 9e10), _point(64, 14.0, 1.2e5, 1e11), _point(512, 2.0, 2e5, 1.5e11)]
    assert choose(points, "energy", None, None).gpus == 8
    assert choose(points, "energy", 20.0, None).gpus == 64  # the deadline rules out 8 GPUs
    assert choose(points, "cost", None, None).gpus == 8 and choose(points, "time", None, None).gpus == 512
    with pytest.raises(ConfigError, match="power figures"):
        choose([_point(8, 1.0, 1.0, None)], "energy", None, None)  # type: ignore[arg-type]


def test_cli_reports_energy_and_plans_for_it() -> None:
    from inprocess import cli

    code, out, err = cli(["estimate", "--model", "llama3-8b", "--gpus", "8", "--tokens", "1e9", "--json"])
    assert code == 0, err
    data = json.loads(out)
    per_step = data["energy_per_step"]
    assert per_step["total_j"] == pytest.approx(per_step["it_j"] * 1.1)
    assert data["energy_per_token_j"] == pytest.approx(per_step["total_j"] / data["plan"]["global_batch"]
                                                       / data["plan"]["seq_len"])
    assert data["train"]["energy_j"] == pytest.approx(data["energy_per_token_j"] * 1e9)
    code, out, err = cli(["estimate", "--model", "llama3-8b", "--gpus", "8"])
    assert code == 0 and "J/token" in out and "MWh" in out, err
    code, out, err = cli(["plan", "--model", "llama3-8b", "--gpus-range", "8:16", "--objective", "energy", "--json",
                          "--dp-sync", "allreduce"])
    assert code == 0, err
    data = json.loads(out)
    energies = [p["energy_j"] for p in data["points"]]
    assert data["choice"]["energy_j"] == min(energies)


def test_ranking_by_energy_finds_no_more_joules_than_the_fastest_plan() -> None:
    from plait.search.runner import run_search
    from plait.search.space import default_space

    model, cluster = get_model("llama3-8b"), get_cluster("dgx-h100-ib")
    space = default_space(model, cluster, 16, (32,), precisions=("bf16",))
    fastest = run_search(model, cluster, space, engine=get_engine()).top(1)[0]
    frugal = run_search(model, cluster, space, engine=get_engine(), rank_by="energy").top(3)
    per_token = [e.energy_j(1.0) for e in frugal]
    assert per_token == sorted(per_token)  # type: ignore[type-var]
    assert per_token[0] <= fastest.energy_j(1.0)  # type: ignore[operator]
    assert frugal[0].tokens_per_s <= fastest.tokens_per_s
