"""The host stream on a CPU: ``plait calibrate``'s per-kernel dispatch figure is written and read back, and on a
device without a launch queue a pass takes its device work plus its host's dispatch (a sum, not the GPU's max).
Timings are left to benchmarks/host_dispatch_cpu.py: these tests check correctness only."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import tomli_w

from plait.cost.host import exposed_host_s
from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import accelerator_names, cluster_from_mapping, get_accelerator, load_cluster_file
from plait.hardware.cluster import Cluster
from plait.hardware.figure import Figure
from plait.plan.plan import Plan
from plait.predict.estimate import estimate
from plait.workload.catalog import resolve_model
from tests.conftest import toy_cluster_mapping

ROOT = Path(__file__).parents[1]
MEASURED = "measured by plait calibrate on 2026-12-06"


def test_the_calibrated_dispatch_figure_is_written_and_read_back(tmp_path: Path) -> None:
    """What calibrate adds to a CPU's description survives the file it writes: the per-kernel figure with its
    source, and the synchronous launch with its own; a GPU's description keeps the launch queue."""
    from plait.run.calibrate import SYNCHRONOUS_CPU, with_host_stream

    table = toy_cluster_mapping()
    table["accelerator"] = with_host_stream(table["accelerator"], "cpu", 23.4567, MEASURED)
    path = tmp_path / "calibrated.toml"
    path.write_text(tomli_w.dumps(table), encoding="utf-8")
    acc = load_cluster_file(path).accelerator
    assert acc.efficiency.host_launch_us == Figure(value=23.457, source=MEASURED)
    assert acc.asynchronous_launch is False and acc.asynchronous_launch_source == SYNCHRONOUS_CPU
    assert acc.efficiency.kernel_launch_us.value == 0.0  # the other figures as they were
    assert acc.efficiency.eager_dispatch_us.value == 0.0  # whole eager ops were timed: no dispatch on top

    gpu = toy_cluster_mapping()
    gpu["accelerator"] = with_host_stream(gpu["accelerator"], "cuda", 7.0, MEASURED)
    acc = cluster_from_mapping(gpu, "gpu").accelerator
    assert acc.asynchronous_launch is True and acc.efficiency.host_launch_us.value == 7.0


def test_a_description_states_its_launch_queue_strictly() -> None:
    """``asynchronous_launch`` is true or false, and says where it comes from."""
    table = toy_cluster_mapping()
    table["accelerator"]["asynchronous_launch"] = "no"
    with pytest.raises(ConfigError, match="asynchronous_launch"):
        cluster_from_mapping(table, "toy")
    table["accelerator"].update(asynchronous_launch=False, asynchronous_launch_source=" ")
    with pytest.raises(ConfigError, match="asynchronous_launch needs a source"):
        cluster_from_mapping(table, "toy")


def test_every_packaged_accelerator_keeps_its_launch_queue() -> None:
    """GPUs enqueue kernels and run ahead (the max join); only a described CPU runs synchronously."""
    assert all(get_accelerator(name).asynchronous_launch for name in accelerator_names())


def test_a_synchronous_pass_adds_all_of_its_host_time() -> None:
    """Device 1.0 s and 2.0 s, host 1.5 s and 1.0 s: behind a queue the passes wait 0.5 s and 0 s for the host;
    without one they take the whole host time on top of the device, 1.5 s and 1.0 s."""
    device, host = np.array([1.0, 2.0]), np.array([1.5, 1.0])
    assert exposed_host_s(device, host, np).tolist() == [0.5, 0.0]
    assert np.asarray(exposed_host_s(device, host, np, asynchronous=False)).tolist() == [1.5, 1.0]


def _described(launch_us: float, asynchronous: bool) -> Cluster:
    """The toy cluster with a host that issues a kernel in ``launch_us`` and runs (a)synchronously: as
    ``plait calibrate`` describes one, the framework's dispatch timed inside the launch figure."""
    cluster = cluster_from_mapping(toy_cluster_mapping(), "toy")
    acc = cluster.accelerator
    eff = replace(acc.efficiency, host_launch_us=Figure(value=launch_us, source="assumed: a test's host"),
                  eager_dispatch_us=Figure(value=0.0, source="assumed: calibrated, in host_launch_us"))
    return replace(cluster, accelerator=replace(acc, efficiency=eff, asynchronous_launch=asynchronous,
                                                asynchronous_launch_source="assumed: a test's device"))


def test_the_tiny_model_pays_every_launch_on_a_synchronous_device() -> None:
    """examples/tiny-model.toml on plait's runtime (eager: q, k, v and gate, up unfused; K/V heads copied out),
    counted by hand per layer forward: two RMSNorms op by op, 8 kernels each (16); GEMMs q, k, v, output, gate, up,
    down (7); two residual adds (2); rotary q and k, 3 each (6); one SDPA kernel (1); SiLU and multiply (2); the
    grouped K/V copied out to 4 heads (1): 35; the backward twice that, 70. One rank, global batch 4 at micro-batch
    1: 4 micro-batches of 4 layers, 4 * 4 * 105 = 1,680 launches, at 10 us each 16.8 ms more than at 0 us."""
    model = resolve_model(str(ROOT / "examples" / "tiny-model.toml"))
    plan = Plan(global_batch=4, micro_batch=1)
    step = {(launch, queued): estimate(model, _described(launch, queued), plan, engine=get_engine("plait"))
            for launch in (0.0, 10.0) for queued in (False, True)}
    added = step[10.0, False].step_time_s - step[0.0, False].step_time_s
    assert added == pytest.approx(1680 * 10e-6, rel=1e-9)
    assert step[10.0, False].time.host_s == pytest.approx(1680 * 10e-6, rel=1e-9)
    # behind a launch queue the same host time overlaps the device's: the step grows by less
    queued = step[10.0, True].step_time_s - step[0.0, True].step_time_s
    assert 0.0 <= queued < added


def test_calibrate_keeps_only_the_dispatch_the_kernel_count_does_not_explain() -> None:
    """A CPU layer measured at 300 us forward and 700 us backward beyond its modelled compute, on a synchronous
    device issuing a kernel in 2 us: the calibration model's layer (plait's runtime, RMSNorm and RoPE op by op) counts
    35 kernels forward and 70 backward (test_the_tiny_model_pays_every_launch_on_a_synchronous_device), 70 us and
    140 us of the host stream; the per-layer figure keeps the rest, 230 us and 560 us, so nothing is charged twice."""
    from plait.cost.prepared import layer_columns
    from plait.run.overheads import LAYERS, PLANS, host_figures, tiny_spec

    cluster = _described(2.0, asynchronous=False)
    kernels, _ = layer_columns(tiny_spec(LAYERS[0]), cluster, PLANS["plain"], get_engine("plait").framework)
    layers = {"plain": (kernels.fwd_s + 3e-4, kernels.bwd_s + 7e-4), "fsdp": (1.0, 1.0), "tp": (1.0, 1.0)}
    got = host_figures(layers, cluster)
    assert got["host_layer_fwd_us"] == pytest.approx(230.0)
    assert got["host_layer_bwd_us"] == pytest.approx(560.0)


def test_an_moe_layer_that_syncs_adds_its_launches_on_a_synchronous_device() -> None:
    """A device-bound MoE layer that syncs after its router (Megatron-Core) takes its device time behind a launch
    queue; without one the experts' and the attention block's launches add to it, whatever the device time."""
    from plait.cost.host import dense_layer_kernels, moe_forward_s, moe_kernels, sync_s
    from plait.cost.setup import Setup
    from plait.workload.catalog import get_model

    def setup(asynchronous: bool) -> Setup:
        model = get_model("deepseek-v3")
        return Setup(model=model, cluster=_described(10.0, asynchronous),
                     plan=Plan(dp_replicate=8, ep=8, global_batch=8).with_seq_len(4096),
                     framework=get_engine("megatron-core").framework)

    queued, synchronous = setup(True), setup(False)
    launches = moe_kernels(synchronous)[0] + dense_layer_kernels(synchronous, True)
    assert launches > 0
    assert moe_forward_s(queued, 1.0, 0.1) == pytest.approx(1.0 + sync_s(queued))
    assert moe_forward_s(synchronous, 1.0, 0.1) == pytest.approx(1.0 + launches * 10e-6 + sync_s(synchronous))
