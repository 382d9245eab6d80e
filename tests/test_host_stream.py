"""The host stream (plait.cost.host): kernels counted from the layer's structure, the two streams joined per pass,
an MoE layer's sync joined inside it, CUDA graphs as an engine fact, and the single-node small-model runs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from plait.cost.estimate import Estimate
from plait.cost.host import (
    dense_layer_kernels,
    exposed_host_s,
    layer_host_s,
    moe_forward_s,
    step_stall_s,
    sync_s,
)
from plait.cost.setup import Setup
from plait.engine.catalog import get_engine
from plait.hardware.catalog import get_cluster
from plait.hardware.figure import Figure
from plait.plan.ops import SCALAR
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.validate.report import validate_rows
from plait.validate.runs import read_runs
from plait.workload.catalog import get_model

SMALL = Path(__file__).parents[1] / "src" / "plait" / "validate" / "data" / "small_runs.csv"


def _cluster(launch_us: float):
    """dgx-h100-ib with its host's time per launch set to ``launch_us``."""
    cluster = get_cluster("dgx-h100-ib")
    acc = cluster.accelerator
    eff = replace(acc.efficiency, host_launch_us=Figure(value=launch_us, source="assumed: a test's host"))
    return replace(cluster, accelerator=replace(acc, efficiency=eff))


def _setup(engine: str = "megatron-core", launch_us: float = 10.0, **plan: object) -> Setup:
    model = get_model("llama3-8b")
    knobs = {"tp": 1, "pp": 1, "dp_replicate": 8, "micro_batch": 1, "global_batch": 8, **plan}
    return Setup(model=model, cluster=_cluster(launch_us), plan=Plan(**knobs).with_seq_len(model.seq_len),
                 framework=get_engine(engine).framework)


def test_a_fused_llama_layer_issues_its_kernels_counted_by_hand() -> None:
    """Megatron-Core on Llama 3 8B (RMSNorm, RoPE, SwiGLU, GQA read directly by the kernel), bf16, no TP: two norms,
    four GEMMs (fused qkv, output projection, fused gate/up, down), two residual adds, rotary q and k, one flash
    kernel, one SwiGLU: 12. Eager torchtitan (its engine facts keep the projections fused): each RMSNorm 8 kernels,
    rotary 3 per tensor, SwiGLU 2, the grouped K/V heads copied out (+1): 16 + 4 + 2 + 6 + 1 + 2 + 1 = 32."""
    assert dense_layer_kernels(_setup()) == 12
    assert dense_layer_kernels(_setup("torchtitan")) == 32
    # tensor parallelism adds two collectives per pass, four with sequence parallelism
    assert dense_layer_kernels(_setup(tp=2, dp_replicate=4, sp=False)) == 14
    assert dense_layer_kernels(_setup(tp=2, dp_replicate=4, sp=True)) == 16


def test_host_seconds_are_kernels_times_the_launch_and_twice_backward() -> None:
    fwd, bwd = layer_host_s(_setup(launch_us=10.0), moe_layer=False)
    assert fwd == pytest.approx(12 * 10e-6) and bwd == pytest.approx(24 * 10e-6)
    fwd_rc, bwd_rc = layer_host_s(_setup(launch_us=10.0, recompute="full"), moe_layer=False)
    assert fwd_rc == fwd and bwd_rc == pytest.approx(bwd + fwd)  # full recomputation re-issues the forward


def test_a_graphed_layer_costs_one_launch_per_pass() -> None:
    s = _setup()
    graphed = replace(s, framework=replace(s.framework, cuda_graph_layers=True))
    assert layer_host_s(graphed, moe_layer=False) == pytest.approx((10e-6, 10e-6))


def test_the_streams_join_at_the_longer_of_the_two() -> None:
    assert exposed_host_s(np.array([1.0, 2.0]), np.array([1.5, 1.0]), np).tolist() == [0.5, 0.0]
    assert exposed_host_s(0.3, 0.2, SCALAR) == 0.0


def _step(engine: str, launch_us: float, **plan: object) -> Estimate:
    model = get_model("gpt3-125m")
    knobs = {"tp": 1, "pp": 1, "dp_replicate": 8, "micro_batch": 1, "global_batch": 8, **plan}
    return estimate(model, _cluster(launch_us), Plan(**knobs), engine=get_engine(engine))


def test_a_host_bound_step_takes_the_hosts_time() -> None:
    """With a host far slower than the device, every pass takes its host time: the step grows by the host's time
    per launch times the kernels of a micro-batch, and its breakdown shows it as ``host``."""
    fast, slow = _step("megatron-core", 0.0), _step("megatron-core", 5000.0)
    assert fast.time.host_s == pytest.approx(26e-6)  # only the step's gradient-norm read-back
    assert slow.time.host_s > 0.0
    layers = get_model("gpt3-125m").num_layers
    setup = Setup(model=get_model("gpt3-125m"), cluster=_cluster(5000.0),
                  plan=Plan(dp_replicate=8, global_batch=8).with_seq_len(2048),
                  framework=get_engine("megatron-core").framework)
    per_layer = sum(layer_host_s(setup, moe_layer=False))
    device = fast.step_time_s - fast.time.optimizer_s - fast.time.dp_comm_s - fast.time.fsdp_comm_s
    busy = slow.step_time_s - slow.time.optimizer_s - slow.time.dp_comm_s - slow.time.fsdp_comm_s
    assert busy == pytest.approx(layers * per_layer, rel=0.02) and busy > device


@pytest.mark.parametrize("launch_us", [1.0, 30.0, 300.0])
def test_the_step_never_shrinks_when_the_host_slows(launch_us: float) -> None:
    assert _step("torchtitan", launch_us).step_time_s >= _step("torchtitan", 0.0).step_time_s
    assert _step("torchtitan", 2 * launch_us).step_time_s >= _step("torchtitan", launch_us).step_time_s


def test_an_moe_layer_with_a_sync_waits_for_its_experts_launches() -> None:
    """Qwen3-30B-A3B-like layer under Megatron-Core: the forward ends no sooner than the device, and no sooner
    than the experts' launches followed by the attention block."""
    model = get_model("deepseek-v3")
    setup = Setup(model=model, cluster=_cluster(10.0),
                  plan=Plan(dp_replicate=8, ep=8, global_batch=8).with_seq_len(4096),
                  framework=get_engine("megatron-core").framework)
    round_trip = sync_s(setup)
    assert round_trip == pytest.approx(26e-6)  # efficiency.toml's host_sync_us
    assert moe_forward_s(setup, 1.0, 0.1) == pytest.approx(1.0 + round_trip)  # device-bound: the device's time
    host_bound = moe_forward_s(setup, 1e-6, 1e-6)
    assert host_bound > 1e-6 + round_trip
    unsynced = replace(setup, framework=replace(setup.framework, moe_host_sync=False))
    assert moe_forward_s(unsynced, 1e-6, 1e-6) == 1e-6  # joined with the pass instead


def test_a_step_pays_one_round_trip_per_sync_its_engine_makes() -> None:
    """Megatron-Core reads the gradient norm back once per step; torchtitan reads nothing back every step."""
    cluster = _cluster(10.0)
    assert step_stall_s(cluster, get_engine("megatron-core").framework) == pytest.approx(26e-6)
    assert step_stall_s(cluster, get_engine("torchtitan").framework) == 0.0
    plan = Plan(dp_replicate=8, global_batch=8)
    model = get_model("gpt3-125m")
    core = estimate(model, cluster, plan, engine=get_engine("megatron-core"))
    assert core.time.host_s >= 26e-6


def test_single_node_small_model_runs() -> None:
    """llm-foundry's MPT-125M..1B on one node of 8 A100s or H100s (README tables, shipped as `plait validate small`):
    MAPE and signed mean within the bounds reached (5.4%, -4.7%: the target's +/-5%; A100 rows about -2.4%, H100 rows
    -8..-22%)."""
    validation = validate_rows(read_runs(SMALL))
    errors = [r.error_pct for r in validation.predicted]
    assert len(errors) == 71
    assert validation.mape_pct <= 6.0
    assert -5.0 <= sum(errors) / len(errors) <= 0.0


def test_a_traced_workload_of_tiny_operators_waits_for_its_host() -> None:
    """A traced model of 100 tiny forward and 200 backward operators per unit (each one launch): with a host at
    10 us per launch, a micro-batch takes its host's 3 ms per unit, not its kernels' 5 us floors (compiled: the
    launches alone); eager PyTorch dispatches each op first, 13.3 us more per op (plait.hardware.eager_dispatch)."""
    from plait.predict.intervals import step_interval_s
    from plait.workloads.traced.cost import estimate_traced
    from plait.workloads.traced.model import Kernel, TracedWorkload, Unit
    from plait.workloads.traced.timing import unit_launches

    tiny = [Kernel("add", 0.0, 0.0, 8.0, backward=False)] * 100 + [Kernel("add", 0.0, 0.0, 8.0, backward=True)] * 200
    body = Unit("block", tuple(tiny), (("w", (4,)),), 0, 0, 0)
    units = (Unit("pre", (), (), 0, 0, 0), body, Unit("post", (), (), 0, 0, 0))
    work = TracedWorkload("toy", (1,), "float32", "float32", units, ("w",), "Toy")
    assert unit_launches(body) == (100, 200)
    plan = Plan(dp_replicate=1, global_batch=1, micro_batch=1, precision="fp32")
    compiled = get_engine("torchtitan[compile=true]")
    est = estimate_traced(work, _cluster(10.0), plan, compiled, step_interval_s)
    assert est.time.compute_s + est.time.host_s == pytest.approx(300 * 10e-6)
    assert est.time.host_s > 0
    eager = estimate_traced(work, _cluster(10.0), plan, get_engine("torchtitan"), step_interval_s)
    assert eager.time.compute_s + eager.time.host_s == pytest.approx(300 * (10 + 13.3) * 1e-6)
    fast = estimate_traced(work, _cluster(0.0), plan, compiled, step_interval_s)
    assert fast.time.host_s == 0.0 and fast.time.compute_s == pytest.approx(300 * 5e-6)  # kernel_launch_us floors
