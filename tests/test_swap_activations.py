"""Activation swapping (``swap_activations``): its cost (:mod:`plait.cost.swap`), its place in the search and the
engines, and its run on gloo ranks (:mod:`plait.run.swap`), where nothing moves physically but every saved byte is
counted and training equals training without it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from plait.cost.batch import evaluate_batch
from plait.cost.params import stage_layer_counts
from plait.cost.prepared import prepare
from plait.cost.swap import swapped_bytes_per_micro_batch
from plait.engine.capability import first_unsupported
from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.export.megatron import megatron_args
from plait.hardware.catalog import get_cluster
from plait.plan.columns import PlanColumns
from plait.plan.io import plan_to_toml, read_plan_file
from plait.plan.ops import SCALAR
from plait.plan.plan import Plan
from plait.plan.rules import check_plan
from plait.predict.estimate import estimate
from plait.search.parts import swap_twins
from plait.workload.catalog import get_model, resolve_model

ROOT = Path(__file__).parents[1]
TINY = ROOT / "examples" / "tiny-model.toml"
H100 = "dgx-h100-ib"
PLAIT = get_engine("plait")


def _estimate(model: str, plan: Plan, cluster: str = H100):  # type: ignore[no-untyped-def]
    return estimate(get_model(model), get_cluster(cluster), plan, engine=PLAIT)


# --- the plan ---------------------------------------------------------------------------------------------------
def test_the_option_round_trips_through_a_plan_file_and_shows_in_describe(tmp_path: Path) -> None:
    plan = Plan(dp_shard=8, sharding="zero3", global_batch=64, swap_activations=True)
    assert "swap-act" in plan.describe() and "swap-act" not in replace(plan, swap_activations=False).describe()
    path = tmp_path / "plan.toml"
    path.write_text(plan_to_toml(plan))
    assert "swap_activations = true" in path.read_text()
    assert read_plan_file(path)[1] == plan
    assert PlanColumns.from_plans([plan]).plan(0) == plan


def test_some_layers_show_in_describe_and_a_count_below_minus_one_is_refused() -> None:
    plan = Plan(dp_shard=8, sharding="zero3", global_batch=64, swap_activations=True, swap_layers=20)
    assert "swap-act[20]" in plan.describe() and PlanColumns.from_plans([plan]).plan(0) == plan
    with pytest.raises(ConfigError, match="swap_layers=-2 must be -1"):
        Plan(swap_layers=-2)
    with pytest.raises(ConfigError, match="swap_layers=33 must be <= layers per stage=32"):
        check_plan(replace(plan, swap_layers=33), get_model("llama3-8b"), get_cluster(H100))


def test_swapping_with_recomputation_is_refused() -> None:
    plan = Plan(dp_shard=8, sharding="zero3", global_batch=64, recompute="full", swap_activations=True)
    with pytest.raises(ConfigError, match="swap_activations needs recompute='none'"):
        check_plan(plan, get_model("llama3-8b"), get_cluster(H100))


# --- the cost model ---------------------------------------------------------------------------------------------
def test_off_by_default_changes_nothing() -> None:
    plan = Plan(dp_shard=8, sharding="zero3", global_batch=64, seq_len=8192)
    est = _estimate("llama3-8b", plan)
    assert est.time.swap_s == 0.0


def test_memory_keeps_two_layers_and_time_charges_the_host_link_by_hand() -> None:
    """llama3-8b, zero3 over 8 H100 (one node: no NIC traffic), mb1, 8k tokens: the device keeps 2 of the 32
    layers' activations (plus the head and loss); each layer's saved bytes cross the 64 GB/s link (datasheet
    figure of accelerators.toml) each way, exposed beyond that layer's forward and backward work."""
    model, cluster = get_model("llama3-8b"), get_cluster(H100)
    plan = Plan(dp_shard=8, sharding="zero3", micro_batch=1, global_batch=64, seq_len=8192)
    swapped = replace(plan, swap_activations=True)
    prepared = prepare(model, cluster, PlanColumns.one(swapped), PLAIT.framework)
    dense = prepared.inner.dense
    base, swap = _estimate("llama3-8b", plan), _estimate("llama3-8b", swapped)
    kept = 2 * dense.activation_bytes + prepared.inner.last_stage_bytes
    assert swap.memory.activations_bytes == pytest.approx(kept, rel=1e-12)
    assert base.memory.activations_bytes == pytest.approx(32 * dense.activation_bytes + prepared.inner.first_stage_bytes
                                                        + prepared.inner.last_stage_bytes, rel=1e-12)
    link = 64e9
    per_layer = (max(0.0, dense.activation_bytes / link - dense.fwd_s - dense.tp_fwd_s)
                 + max(0.0, dense.activation_bytes / link - dense.bwd_s - dense.tp_bwd_s))
    micro_batches = 64 // 8
    assert swap.time.swap_s == pytest.approx(micro_batches * 32 * per_layer, rel=1e-9)
    assert swap.step_time_s == pytest.approx(base.step_time_s + swap.time.swap_s, rel=1e-9)


def test_swapping_some_layers_moves_only_theirs() -> None:
    """llama3-70b (80 identical dense layers) under zero3 over 64 GB200, mb2 x 8k tokens, one micro-batch in flight
    (no pipeline): every layer swapped keeps two on the device; the first k keep the other 80 - k and two of theirs,
    so the device's activations fall by exactly one layer's bytes per layer swapped past the second, the host holds
    what the device gave up, and the exposed copies grow linearly with k; 0 layers is no swapping at all."""
    model, cluster = get_model("llama3-70b"), get_cluster("gb200-nvl72")
    plan = Plan(dp_shard=64, sharding="zero3", micro_batch=2, global_batch=256, seq_len=8192, precision="fp8")
    layer = prepare(model, cluster, PlanColumns.one(plan), PLAIT.framework).inner.dense.activation_bytes
    off = _estimate("llama3-70b", plan, "gb200-nvl72")
    some = {k: _estimate("llama3-70b", replace(plan, swap_activations=True, swap_layers=k), "gb200-nvl72")
            for k in (0, 10, 20, 40)}
    assert some[0].step_time_s == off.step_time_s and some[0].memory.total_bytes == off.memory.total_bytes
    for k in (10, 20, 40):
        assert some[k].memory.activations_bytes == pytest.approx(off.memory.activations_bytes - (k - 2) * layer,
                                                                 rel=1e-12)
        assert some[k].memory.host_activations_bytes == pytest.approx((k - 2) * layer, rel=1e-12)
    assert some[10].time.swap_s > 0
    assert some[20].time.swap_s == pytest.approx(2 * some[10].time.swap_s, rel=1e-12)
    assert some[40].time.swap_s == pytest.approx(2 * some[20].time.swap_s, rel=1e-12)


def test_megatron_bridges_offload_count_is_the_least_that_fits_a_gb200() -> None:
    """Megatron-Bridge 25.11's Llama 3 70B FP8 current-scaling recipe on GB200 (zero3 over 64, mb2, no
    recomputation) offloads the first 40 of 80 layers (plait/validate/runs.py ``_MB_OFFLOAD``): by plait's memory
    model of that engine 40 fits the 186 GB and 30 does not, nor does keeping every activation; recomputing every
    layer fits too, at a higher step time."""
    model, cluster = get_model("llama3-70b"), get_cluster("gb200-nvl72")
    engine = get_engine("megatron-bridge@25.11[fp8_recipe=current]")
    plan = Plan(dp_shard=64, sharding="zero3", micro_batch=2, global_batch=256, seq_len=8192, precision="fp8")
    offload = lambda k: estimate(model, cluster, replace(plan, swap_activations=True, swap_layers=k), engine=engine)
    assert {k: offload(k).memory.fits for k in (0, 30, 40)} == {0: False, 30: False, 40: True}
    recomputed = estimate(model, cluster, replace(plan, recompute="full"), engine=engine)
    offloaded = offload(40)
    assert recomputed.memory.fits and offloaded.step_time_s < recomputed.step_time_s


def test_a_wide_layer_hides_its_copies_behind_its_compute() -> None:
    """Copies grow with s*b*h, a layer's GEMMs with s*b*h^2: at 405B's width (16,384) and tp8 the copies hide."""
    plan = Plan(tp=8, sp=True, pp=16, dp_shard=1, micro_batch=1, global_batch=16, seq_len=8192, swap_activations=True)
    est = _estimate("llama3.1-405b", plan, H100)
    assert est.time.swap_s == 0.0


def test_collectives_leaving_the_node_slow_the_copies() -> None:
    """The same per-GPU work on 8 GPUs (one node) and on 64 (the zero3 gathers cross the NIC, which shares the
    GPU's PCIe link): the swap's exposed time grows, never shrinks."""
    one_node = Plan(dp_shard=8, sharding="zero3", micro_batch=1, global_batch=8, seq_len=8192, swap_activations=True)
    nodes = replace(one_node, dp_shard=64, global_batch=64)
    assert _estimate("llama3-8b", nodes).time.swap_s > _estimate("llama3-8b", one_node).time.swap_s > 0


def test_swapped_activations_must_fit_in_host_memory() -> None:
    """llama3-70b at mb2 x 8k tokens: 80 layers' activations leave 2 layers on the device but exceed the 256 GiB of
    host memory per GPU of a DGX A100 (clusters.toml): the plan does not fit, though its device memory does."""
    plan = Plan(dp_shard=64, sharding="zero3", micro_batch=2, global_batch=128, seq_len=8192, swap_activations=True)
    memory = _estimate("llama3-70b", plan, "dgx-a100-ib").memory
    assert memory.total_bytes <= memory.capacity_bytes
    assert memory.host_activations_bytes > memory.host_capacity_bytes == 256 * 2**30
    assert not memory.fits
    smaller = _estimate("llama3-70b", replace(plan, micro_batch=1, global_batch=64), "dgx-a100-ib").memory
    assert smaller.fits and smaller.host_activations_bytes == pytest.approx(memory.host_activations_bytes / 2, rel=1e-9)


def test_on_a_cpu_device_swapping_changes_nothing() -> None:
    """A CPU device (ops run as issued, as ``plait calibrate`` describes a CPU) is the host: nothing to swap."""
    h100 = get_cluster(H100)
    cpu = replace(h100, accelerator=replace(h100.accelerator, asynchronous_launch=False,
                                            asynchronous_launch_source="a test's CPU"))
    plan = Plan(dp_replicate=2, micro_batch=2, global_batch=8, seq_len=64)
    model = resolve_model(str(TINY))
    base = estimate(model, cpu, plan, engine=PLAIT)
    swap = estimate(model, cpu, replace(plan, swap_activations=True), engine=PLAIT)
    assert swap.step_time_s == base.step_time_s and swap.memory.total_bytes == base.memory.total_bytes
    on_gpu = estimate(model, h100, replace(plan, swap_activations=True), engine=PLAIT)
    assert on_gpu.memory.activations_bytes < estimate(model, h100, plan, engine=PLAIT).memory.activations_bytes


def test_a_batch_equals_single_estimates() -> None:
    model, cluster = get_model("llama3-8b"), get_cluster(H100)
    plans = [Plan(dp_shard=64, sharding="zero3", micro_batch=m, global_batch=128, seq_len=8192, swap_activations=s,
                  swap_layers=k) for m in (1, 2) for s, k in ((False, -1), (True, -1), (True, 7))]
    batch = evaluate_batch(model, cluster, PlanColumns.from_plans(plans), PLAIT.framework)
    for i, plan in enumerate(plans):
        one = evaluate_batch(model, cluster, PlanColumns.one(plan), PLAIT.framework)
        assert batch.time["swap"][i] == pytest.approx(one.time["swap"], rel=1e-12)
        assert batch.memory["total"][i] == pytest.approx(one.memory["total"], rel=1e-12)
        assert batch.memory["host_activations"][i] == pytest.approx(one.memory["host_activations"], rel=1e-12)


# --- search and engines -----------------------------------------------------------------------------------------
def test_twins_are_made_only_where_memory_binds_without_recomputation() -> None:
    plans = [Plan(dp_shard=8, sharding="zero3", global_batch=64, recompute=r) for r in ("none", "none", "full")]
    cols = PlanColumns.from_plans(plans)
    twins = swap_twins(cols, np.array([True, False, False]))
    assert twins is not None and len(twins) == 1 and twins.plan(0) == replace(plans[1], swap_activations=True)
    assert swap_twins(cols, np.array([True, True, False])) is None


def test_a_twin_swaps_the_fewest_layers_that_fit_and_never_too_few() -> None:
    """llama3-70b on 64 GB200 at mb1..4 (zero3, nothing recomputed): each twin's count fits once costed exactly, is a
    few layers above the least count that fits (two resident layers and the allocator's share are counted against
    it), and is -1 where even every layer does not bring the plan under the limit."""
    from plait.search.parts import fewest_swapped_layers, peak_sizes

    model, cluster = get_model("llama3-70b"), get_cluster("gb200-nvl72")
    plans = [Plan(dp_shard=64, sharding="zero3", micro_batch=m, global_batch=256, seq_len=s, precision="fp8")
             for m, s in ((1, 8192), (2, 8192), (4, 8192), (4, 65536))]
    limit = cluster.accelerator.memory_bytes * 0.95
    counts = fewest_swapped_layers(model, peak_sizes(model, cluster, PlanColumns.from_plans(plans), PLAIT.framework),
                                   limit)
    assert counts[-1] == -1 and all(0 < k < model.num_layers for k in counts[:-1]), counts
    for plan, k in zip(plans[:-1], counts[:-1]):
        total = lambda n: _estimate("llama3-70b", replace(plan, swap_activations=True, swap_layers=int(n)),
                                    "gb200-nvl72").memory.total_bytes
        assert total(k) <= limit < total(k - 5)


def test_the_planner_swaps_where_activations_do_not_fit() -> None:
    """llama3-8b at 32k tokens on one H100 node, recomputation off the table: only swapping fits it."""
    from plait.search.runner import run_search
    from plait.search.space import default_space

    model, cluster = get_model("llama3-8b"), get_cluster(H100)
    space = replace(default_space(model, cluster, 8, (8,), seq_len=32768), recompute=(("none", 1.0),),
                    cp=(1,), tp=(1,), pp=(1,), micro_batches=(1,), precisions=("bf16",))
    found = run_search(model, cluster, space, engine=PLAIT, workers=1)
    best = found.top(1)[0]
    assert best.plan.swap_activations, best.plan.describe()
    assert found.num_candidates == sum(found.reasons.values()) + found.num_feasible
    without = run_search(model, cluster, replace(space, swap_activations=False), engine=PLAIT, workers=1)
    assert without.num_feasible == 0


@pytest.mark.parametrize("engine,fragment", [
    ("torchtitan", "swap_activations=true is not supported by torchtitan"),
    ("deepspeed", "swap_activations=true is not supported by deepspeed"),
])
def test_engines_without_activation_offload_refuse_it(engine: str, fragment: str) -> None:
    plan = Plan(dp_shard=8, sharding="zero3", global_batch=64, swap_activations=True)
    refusal = first_unsupported(plan, get_model("llama3-8b"), get_engine(engine))
    assert refusal is not None and refusal.startswith(fragment), refusal


def test_megatron_core_exports_cpu_offloading_and_refuses_it_with_pipelines() -> None:
    model = get_model("llama3-8b")
    plan = Plan(dp_shard=8, sharding="zero1", global_batch=64, swap_activations=True)
    assert first_unsupported(plan, model, get_engine("megatron-core")) is None
    args, _ = megatron_args(plan, model)
    assert args[args.index("--cpu-offloading-num-layers") + 1] == str(model.num_layers - 1)
    args, _ = megatron_args(replace(plan, swap_layers=12), model)
    assert args[args.index("--cpu-offloading-num-layers") + 1] == "12"
    every = first_unsupported(replace(plan, swap_layers=model.num_layers), model, get_engine("megatron-bridge@25.11"))
    assert every is not None and f"swap_layers={model.num_layers}" in every
    piped = replace(plan, pp=2, dp_shard=4)
    assert "swap_activations=true with pp=2" in (first_unsupported(piped, model, get_engine("megatron-core")) or "")


# --- the runtime on gloo ranks ----------------------------------------------------------------------------------
STEPS = 4


def _train(tmp: Path, name: str, body: str, nproc: int) -> tuple[list[dict[str, object]], str]:
    from tests.ranks import run_ranks

    plan = tmp / f"{name}.toml"
    plan.write_text(f'[job]\nmodel = "{TINY}"\n[plan]\nglobal_batch = 8\nmicro_batch = 2\n{body}\n')
    metrics = tmp / f"{name}.jsonl"
    out = run_ranks(nproc, ["-m", "plait.run.worker", "--plan", str(plan), "--full-precision", "--steps", str(STEPS),
                            "--metrics", str(metrics)], timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in metrics.read_text().splitlines()], out.stderr


@pytest.mark.slow
@pytest.mark.parametrize("layout", ['dp_shard = 2\nsharding = "zero3"', "pp = 2"])
def test_swap_matches_no_swap_under_fsdp_and_pipelines(layout: str, tmp_path: Path) -> None:
    """FSDP2's gathered parameters are parameters (not swapped), and a pipeline schedule runs inside the hooks."""
    pytest.importorskip("torch")
    plain, _ = _train(tmp_path, "plain", layout, 2)
    swapped, _ = _train(tmp_path, "swap", f"{layout}\nswap_activations = true", 2)
    assert [r["loss"] for r in swapped] == pytest.approx([r["loss"] for r in plain], rel=1e-5)
    if "zero3" in layout:  # whole layers on each rank, as under DDP: the same bytes as the DDP test's
        plan = Plan(dp_shard=2, sharding="zero3", micro_batch=2, global_batch=8, seq_len=64, precision="fp32",
                    swap_activations=True)
        assert swapped[0]["swap_layer_bytes"] == _predicted_layer_bytes(plan)


def _predicted_layer_bytes(plan: Plan) -> float:
    """The cost model's swapped bytes per step of one rank's layers, plus the eager norms' (:func:`_eager_norms`)."""
    model, cluster = resolve_model(str(TINY)), get_cluster(H100)
    prepared = prepare(model, cluster, PlanColumns.one(plan), PLAIT.framework)
    n_dense, n_moe = stage_layer_counts(model, plan.pp, 0, SCALAR)
    per_micro_batch = swapped_bytes_per_micro_batch(prepared.cols, prepared.inner, n_dense, n_moe)
    swapped = n_dense + n_moe if plan.swap_layers < 0 else min(plan.swap_layers, n_dense + n_moe)
    return plan.num_micro_batches * (per_micro_batch + swapped * _eager_norms(plan))


@pytest.mark.slow
def test_swapping_some_layers_matches_no_swap_on_two_gloo_ranks(tmp_path: Path) -> None:
    """The first 2 of the tiny model's 4 layers: the same losses, and the bytes of those 2 layers' saves alone."""
    pytest.importorskip("torch")
    plain, _ = _train(tmp_path, "plain", "dp_replicate = 2", 2)
    swapped, _ = _train(tmp_path, "some", "dp_replicate = 2\nswap_activations = true\nswap_layers = 2", 2)
    assert [r["loss"] for r in swapped] == pytest.approx([r["loss"] for r in plain], rel=1e-5)
    plan = Plan(dp_replicate=2, micro_batch=2, global_batch=8, seq_len=64, precision="fp32", swap_activations=True,
                swap_layers=2)
    assert swapped[0]["swap_layer_bytes"] == swapped[0]["swap_bytes"] == _predicted_layer_bytes(plan)
    every = replace(plan, swap_layers=-1)
    assert 0 < _predicted_layer_bytes(plan) == _predicted_layer_bytes(every) / 2


@pytest.mark.slow
def test_swap_matches_no_swap_on_two_gloo_ranks(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    plain, _ = _train(tmp_path, "plain", "dp_replicate = 2", 2)
    swapped, stderr = _train(tmp_path, "swap", "dp_replicate = 2\nswap_activations = true", 2)
    assert "nothing moves" in stderr.replace("move nothing", "nothing moves")
    assert [r["loss"] for r in swapped] == pytest.approx([r["loss"] for r in plain], rel=1e-5)
    assert all("swap_bytes" not in r for r in plain)
    assert len({r["swap_bytes"] for r in swapped}) == 1  # the same bytes every step
    # the bytes packed inside the blocks against the cost model's activation bytes of the same micro-batches
    plan = Plan(dp_replicate=2, micro_batch=2, global_batch=8, seq_len=64, precision="fp32", swap_activations=True)
    assert swapped[0]["swap_layer_bytes"] == _predicted_layer_bytes(plan)


def _eager_norms(plan: Plan) -> int:
    """What the runtime saves per layer beyond the cost model's activation bytes: ``nn.RMSNorm`` runs op by op on a
    CPU, so each of a layer's two norms also saves its normalized input (the multiply by the weight saves it,
    PyTorch's derivatives.yaml) and its fp32 reciprocal root per token; the cost model counts a norm's input only."""
    tokens = plan.micro_batch * plan.seq_len
    hidden = resolve_model(str(TINY)).hidden_size
    return 2 * (tokens * hidden * 4 + tokens * 4)


def test_the_copying_path_trains_bit_for_bit_on_a_cpu() -> None:
    """The path a GPU takes (each distinct storage copied out, views rebuilt from the copy brought back), run on a
    CPU into separate host buffers: the same loss and gradients as no hooks, and as many bytes as counting only."""
    torch = pytest.importorskip("torch")
    from plait.run.model import build_model
    from plait.run.swap import ActivationSwap
    from plait.run.train import cross_entropy

    spec = resolve_model(str(TINY))
    tokens = torch.randint(0, spec.vocab_size, (2, 64), generator=torch.Generator().manual_seed(0))
    results = {}
    for mode in ("none", "count", "copy"):
        model = build_model(spec, 64, seed=0)
        swap = None if mode == "none" else ActivationSwap([model], "cpu", copy=mode == "copy")
        with swap if swap is not None else _nothing():
            loss = cross_entropy(model(tokens[:, :-1].contiguous()), tokens[:, 1:].contiguous())
            loss.backward()
        results[mode] = (loss.detach(), [p.grad for p in model.parameters()], swap and swap.packed_bytes)
    for mode in ("count", "copy"):
        assert torch.equal(results[mode][0], results["none"][0])
        assert all(torch.equal(a, b) for a, b in zip(results[mode][1], results["none"][1]))
    assert results["copy"][2] == results["count"][2] > 0


def _nothing():  # type: ignore[no-untyped-def]
    import contextlib

    return contextlib.nullcontext()


def test_a_traced_workload_refuses_swapping_in_one_line() -> None:
    """Any traced workload: the zoo's small CNN (a trace of ResNet-50 takes seconds and is not what is refused)."""
    pytest.importorskip("torch")
    from plait.workloads.traced.cost import check_traced_plan
    from plait.workloads.traced.tracing import trace

    with pytest.raises(ConfigError, match="swap_activations is not costed for traced workloads"):
        check_traced_plan(trace("plait.workload.zoo:small_cnn"), Plan(dp_replicate=8, global_batch=256,
                                                                    swap_activations=True))
