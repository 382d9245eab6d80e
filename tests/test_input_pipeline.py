"""The input pipeline (plait.cost.input_pipeline) and fp32 GEMMs on GPUs without matrix units: hand-computable
cases, the loader-bound step of a traced estimate, and the packaged loader and host-core figures."""

from __future__ import annotations

from dataclasses import replace

import pytest

from plait.cost.compute import matmul_flops_per_s
from plait.cost.input_pipeline import Loader, get_loader, host_cores_per_used_gpu, input_wait_s, loader_step_s
from plait.errors import ConfigError
from plait.hardware.catalog import get_accelerator, get_cluster
from plait.hardware.figure import Figure


def _loader(seconds: float, workers: int | None = None) -> Loader:
    return Loader(kind="framework_jpeg", host_s_per_sample=Figure(value=seconds, source="assumed: test"),
                  workers_per_gpu=workers)


def test_loader_time_is_samples_times_cost_over_workers() -> None:
    # 256 images at 4 ms each on 8 cores: 256 * 0.004 / 8 = 0.128 s
    assert loader_step_s(_loader(0.004), 256, 8.0) == pytest.approx(0.128)
    # 5 workers on 16 cores: the workers bound it, 256 * 0.004 / 5
    assert loader_step_s(_loader(0.004, workers=5), 256, 16.0) == pytest.approx(0.2048)


def test_the_step_waits_only_for_the_slower_stream() -> None:
    assert input_wait_s(step_s=0.10, loader_s=0.25) == pytest.approx(0.15)  # slow host loader: it sets the step
    assert input_wait_s(step_s=0.30, loader_s=0.25) == 0.0  # fast loader: prefetching hides it


def test_dali_gpu_and_pretokenized_text_put_no_work_on_the_host() -> None:
    for kind in ("dali_gpu", "pretokenized", "synthetic"):
        assert loader_step_s(get_loader(kind), 256, 1.0) == 0.0
    assert loader_step_s(get_loader("framework_jpeg"), 256, 1.0) > 0.0  # JPEG decode costs host time


def test_a_job_smaller_than_a_node_gets_the_idle_gpus_cores() -> None:
    dgx1 = get_cluster("dgx1-v100")  # 40 cores for 8 GPUs
    assert host_cores_per_used_gpu(dgx1, 8) == pytest.approx(5.0)
    assert host_cores_per_used_gpu(dgx1, 1) == pytest.approx(40.0)
    assert host_cores_per_used_gpu(dgx1, 64) == pytest.approx(5.0)


def test_unknown_loader_and_missing_cores_are_one_line_errors() -> None:
    with pytest.raises(ConfigError, match="loader='pil'"):
        get_loader("pil")
    with pytest.raises(ConfigError, match="workers_per_gpu=0"):
        _loader(0.001, workers=0)
    bare = replace(get_cluster("dgx1-v100"), host_cores_per_node=0)
    with pytest.raises(ConfigError, match="host_cores_per_node"):
        host_cores_per_used_gpu(bare, 8)


def test_a_slow_host_makes_the_traced_step_the_loaders() -> None:
    pytest.importorskip("transformers")
    from plait.engine.catalog import get_engine
    from plait.plan.plan import Plan
    from plait.predict.intervals import step_interval_s
    from plait.workloads.traced.cost import TracedRunFacts, estimate_traced
    from plait.workloads.traced.tracing import trace

    work, cluster = trace("plait.workload.zoo:resnet50"), get_cluster("dgx1-v100")
    plan = Plan(dp_replicate=8, sharding="none", micro_batch=64, global_batch=512, precision="fp16", optimizer="sgd")
    bare = estimate_traced(work, cluster, plan, get_engine(), step_interval_s)
    slow = _loader(0.05)  # 50 ms per image on 5 cores: 64 * 0.05 / 5 = 0.64 s, far above the device's step
    host_bound = estimate_traced(work, cluster, plan, get_engine(), step_interval_s, TracedRunFacts(loader=slow))
    assert host_bound.time.total_s == pytest.approx(0.64)
    gpu = estimate_traced(work, cluster, plan, get_engine(), step_interval_s, TracedRunFacts(loader=get_loader("dali_gpu")))
    assert gpu.time.total_s == pytest.approx(bare.time.total_s)  # DALI on the GPU moves decode off the host


def test_packaged_presets_state_their_host_cores_with_a_source() -> None:
    for slug, cores in (("dgx1-v100", 5.0), ("dgx-a100-ib", 16.0), ("dgx2-v100", 3.0), ("dgx1-p100", 4.0)):
        cluster = get_cluster(slug)
        assert cluster.host_cores_per_gpu == cores and cluster.host_cores_source.strip()


def test_fp32_on_gpus_without_matrix_units_runs_at_their_gemm_fraction() -> None:
    p100, v100 = get_accelerator("p100"), get_accelerator("v100")
    assert not p100.has_matrix_units and v100.has_matrix_units
    # P100: fp16 (half2) is 2x fp32 on the same cores, so fp32 GEMMs reach the 16-bit curve's fraction of 10.6 TFLOP/s
    fraction = p100.efficiency.matmul_bf16.at(4096)
    assert matmul_flops_per_s(p100, "fp32", 4096) == pytest.approx(10.6e12 * fraction)
    assert matmul_flops_per_s(p100, "fp32", 4096) < p100.peak_flops("fp32")


def test_matrix_units_are_read_from_the_datasheet_peaks() -> None:
    # Kepler and Pascal: 16-bit runs on the fp32 cores (K80 1x, P100 SXM2 2.0x, P100 PCIe 18.7/9.3 = 2.01x)
    assert [n for n in ("k80", "p100", "p100-pcie") if get_accelerator(n).has_matrix_units] == []
    # Volta and Turing (8x), and every part whose datasheet lists bf16 or TF32 (L20's fp16 is 2x its fp32)
    assert all(get_accelerator(n).has_matrix_units for n in ("v100", "t4", "l20", "a100-80gb", "mi250x"))


def test_the_command_line_costs_a_loader_and_a_layout_for_a_traced_module() -> None:
    """``--loader KIND:workers=N`` and ``--channels-last`` reach the estimate: ResNet-50 in fp16 on a DGX-1's V100s,
    256 images per GPU a step through 2 JPEG workers per GPU take 256 x 2.1 ms / 2 = 0.269 s of host time (the
    packaged per-image figure), which the step then waits for; without them the estimate says what it assumed."""
    pytest.importorskip("transformers")
    import json

    from tests.inprocess import cli

    base = ["estimate", "--model", "plait.workload.zoo:resnet50", "--cluster", "dgx1-v100", "--gpus", "8",
            "--global-batch", "2048", "--precision", "fp16", "--json"]
    code, out, err = cli(base)
    assert code == 0, err
    plain = json.loads(out)
    assert any("no data loader costed" in w for w in plain["warnings"])
    code, out, err = cli([*base, "--loader", "framework_jpeg:workers=2", "--channels-last"])
    assert code == 0, err
    fed = json.loads(out)
    assert fed["step_time_s"] == pytest.approx(256 * get_loader("framework_jpeg").host_s_per_sample.value / 2)
    assert not [w for w in fed["warnings"] if "no data loader" in w or "NCHW" in w]


@pytest.mark.parametrize(("argv", "rule"), [
    (["estimate", "--model", "llama3-8b", "--loader", "dali_gpu"], "--loader and --channels-last describe a traced"),
    (["estimate", "--model", "llama3-8b", "--channels-last"], "--loader and --channels-last describe a traced module"),
    (["plan", "--model", "llama3-8b", "--loader", "dali_gpu"], "--loader and --channels-last describe a traced module"),
    (["plan", "--cluster", "h100-b200-ib", "--channels-last"], "--loader and --channels-last describe a traced"),
    (["estimate", "--model", "plait.workload.zoo:resnet50", "--loader", "jpeg"], "loader='jpeg' is not one of"),
    (["plan", "--model", "plait.workload.zoo:resnet50", "--loader", "dali_cpu:workers=0"], "the only option is workers"),
])
def test_loader_options_are_refused_in_one_line(argv: list[str], rule: str) -> None:
    from tests.inprocess import cli

    code, _, err = cli(argv)
    assert code == 2 and rule in err and len(err.strip().splitlines()) == 1, err


def test_the_planner_ranks_traced_plans_fed_by_the_loader() -> None:
    """``plait plan --loader``: every plan of the search waits for the same loader, so the best one's step is the
    loader's time where the loader is the slower stream (the command-line test above, searched)."""
    pytest.importorskip("transformers")
    import json

    from tests.inprocess import cli

    code, out, err = cli(["plan", "--model", "plait.workload.zoo:resnet50", "--cluster", "dgx1-v100", "--gpus", "8",
                          "--global-batch", "2048", "--precision", "fp16", "--loader", "framework_jpeg:workers=2",
                          "--top", "1", "--json"])
    assert code == 0, err
    best = json.loads(out)["top"][0]
    assert best["step_time_s"] == pytest.approx(256 * get_loader("framework_jpeg").host_s_per_sample.value / 2)
