"""Any PyTorch module as a workload: a module traced on the meta device against the closed forms plait
keeps for its catalog transformers, and against published figures of ResNet-50."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from plait.cost import activations as act
from plait.cost.flops import model_flops_per_token
from plait.cost.setup import Setup
from plait.engine.catalog import get_engine
from plait.errors import ConfigError
from plait.hardware.catalog import get_cluster
from plait.plan.plan import Plan
from plait.validate.datasets import dataset_path
from plait.workload.catalog import get_model

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]

from plait.run.model import Transformer
from plait.workloads.traced.tracing import trace, trace_factory


def _traced_catalog(name: str, seq: int, layers: int):  # type: ignore[no-untyped-def]
    """The catalog model as plait's reference module builds it (its own output head: untied), at ``layers`` of its
    layers (the same shapes: a layer's closed forms do not depend on the depth)."""
    spec = replace(get_model(name), seq_len=seq, tied_embeddings=False, num_layers=layers)
    return spec, trace_factory(lambda: Transformer(spec, seq), name, (seq,), "int64")


@pytest.mark.slow
@pytest.mark.parametrize("name, seq, layers", [("llama3-8b", 8192, 8), ("gpt3-175b", 2048, 8)])
def test_traced_catalog_transformer_agrees_with_the_closed_forms(name: str, seq: int, layers: int) -> None:
    """Parameters exact, FLOPs within 1%, each layer's saved activations within 5% of plait's closed forms for the
    engine that runs this module (plait's runtime: eager pointwise ops, K/V repeated before attention; bf16 as
    under FSDP2's mixed precision). The closed form counts model FLOPs (PaLM's 6N + 12LHQT per token: a backward
    of twice the forward); FlashAttention's backward also recomputes the scores, one S x S x d product per layer
    more (2 S^2 d FLOPs), which the trace counts (PyTorch's formula for ``_flash_attention_backward``). Each model
    keeps 8 of its layers (32, 96), shapes unchanged: the trace's time grows with the depth while each layer's
    closed forms do not depend on it, and the totals' 1% then weighs the embedding and the head more, not less."""
    spec, traced = _traced_catalog(name, seq, layers)
    assert traced.total_params() == spec.total_params()
    assert traced.unit_class == "Block" and len(traced.units) == spec.num_layers + 2
    plan = Plan(global_batch=1, micro_batch=1, seq_len=seq, sharding="zero3")
    setup = Setup(model=spec, cluster=get_cluster("dgx-h100-ib"), plan=plan, framework=get_engine("plait").framework)
    model_flops = model_flops_per_token(setup) * seq
    assert traced.flops_per_example(backward=False) == pytest.approx(model_flops / 3, rel=0.01)
    recomputed = spec.num_layers * 2 * seq**2 * spec.num_heads * spec.head_dim
    assert traced.flops_per_example() == pytest.approx(model_flops + recomputed, rel=0.01)
    for unit in traced.units[1:-1]:
        assert unit.saved_bytes(1) == pytest.approx(act.layer_bytes(setup, False), rel=0.05)


def test_gradients_complete_from_the_head_back_to_the_embedding() -> None:
    """Llama 3 8B's shapes at 4 of its 32 layers: the order from the head back to the embedding, through each layer
    before the one below it, is the same at any depth of two or more."""
    spec, traced = _traced_catalog("llama3-8b", 256, 4)
    order = traced.grad_order
    assert order[0] == "output.weight" and order[-1] == "tok_embeddings.weight"
    assert sorted(order) == sorted(name for name, _ in traced.named_params)
    last_layer = [i for i, n in enumerate(order) if n.startswith(f"layers.{spec.num_layers - 1}.")]
    first_layer = [i for i, n in enumerate(order) if n.startswith("layers.0.")]
    assert max(last_layer) < min(first_layer)


def test_resnet50_matches_its_published_size() -> None:
    """torchvision's model table (docs.pytorch.org/vision/stable/models.html, ResNet50_Weights.IMAGENET1K_V1):
    25,557,032 parameters and 4.09 GFLOPS per 224 x 224 image, counted as multiply-adds (a multiply-add is two
    FLOPs in PyTorch's FlopCounterMode, whose formulas the trace uses)."""
    pytest.importorskip("transformers")
    traced = trace("plait.workload.zoo:resnet50")
    assert traced.total_params() == 25_557_032
    assert traced.flops_per_example(backward=False) == pytest.approx(2 * 4.09e9, rel=0.01)
    assert traced.flops_per_example(backward=True) == pytest.approx(2 * traced.flops_per_example(False), rel=0.03)


@pytest.mark.parametrize("name, rule", [
    ("no_such_module_xyz:build", "module 'no_such_module_xyz' does not import"),
    ("plait.workload.zoo:nothing", "has no callable 'nothing'"),
    ("math:pi", "has no callable 'pi'"),
])
def test_bad_factories_are_refused_in_one_line(name: str, rule: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(rule)) as caught:
        trace(name, (4,))
    assert "\n" not in str(caught.value)


def test_a_factory_that_builds_no_module_is_refused() -> None:
    with pytest.raises(ConfigError, match="not a torch.nn.Module"):
        trace_factory(lambda: 3, "three", (4,))
    with pytest.raises(ConfigError, match="give --input-shape"):
        trace_factory(lambda: torch.nn.Linear(4, 4), "linear")


def test_pipeline_stages_balance_contiguous_units() -> None:
    from plait.workloads.traced.timing import split_stages

    # pre and post ride with the first and last stages: weights 1+5, 1, 1, 5+1
    assert split_stages([1, 5, 1, 1, 5, 1], 2) == [[0, 1, 2], [3, 4, 5]]
    assert split_stages([0, 1, 1, 1, 1, 0], 4) == [[0, 1], [2], [3], [4, 5]]
    assert split_stages([1, 2, 3], 1) == [[0, 1, 2]]


def test_ddp_buckets_expose_only_what_follows_the_backward() -> None:
    """Two 40 MB gradients (over the 25 MB cap: a bucket each), the second unit's ready after 1 s of backward and
    the first's after 2 s: the first bucket's all-reduce hides behind the second unit's backward, the last one is
    exposed whole (Li et al. 2020, Sec. 3.2.3)."""
    from plait.cost.links import collective_s
    from plait.workloads.traced.dataparallel import ddp_buckets_s
    from plait.workloads.traced.model import TracedWorkload, Unit

    elements = 10 * 2**20
    units = (Unit("pre", (), (), 0, 0, 0), Unit("a", (), (("a.weight", (elements,)),), 0, 0, 0),
             Unit("b", (), (("b.weight", (elements,)),), 0, 0, 0), Unit("post", (), (), 0, 0, 0))
    work = TracedWorkload("toy", (1,), "float32", "float32", units, ("b.weight", "a.weight"), "Toy")
    cluster, plan = get_cluster("dgx-a100-ib"), Plan(dp_replicate=8, global_batch=8, micro_batch=1)
    one = float(collective_s(cluster, "all_reduce", 8, 1, 4.0 * elements))
    assert one < 1.0
    seconds = [(0.0, 0.0), (0.0, 1.0), (0.0, 1.0), (0.0, 0.0)]
    assert ddp_buckets_s(cluster, plan, work, [0, 1, 2, 3], seconds, 4.0) == pytest.approx(one)


def _cli_json(argv: list[str]) -> dict[str, object]:
    """``plait ARGV`` run in this process (the console script's code path; traces stay cached), its JSON."""
    import contextlib
    import io
    import json

    from plait.cli.main import run_cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert run_cli(argv) == 0
    return json.loads(out.getvalue())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def resnet_estimates() -> dict[str, dict[str, object]]:
    """The issue's two commands: ResNet-50 on 64 A100s, global batch 2048, all-reduce and PowerSGD."""
    pytest.importorskip("transformers")
    return {label: _cli_json(["estimate", "--model", "plait.workload.zoo:resnet50", "--cluster", "dgx-a100-ib",
                              "--gpus", "64", "--global-batch", "2048", *extra, "--json"])
            for label, extra in (("allreduce", []), ("powersgd", ["--dp-sync", "powersgd:rank=4"]))}


def test_resnet50_estimates_break_down_in_full(resnet_estimates) -> None:  # type: ignore[no-untyped-def]
    for est in resnet_estimates.values():
        times = est["time_breakdown_s"]
        assert sum(times.values()) == pytest.approx(est["step_time_s"])
        assert times["compute"] > 0 and times["dp_comm"] > 0 and times["optimizer"] > 0
        assert est["sample_unit"] == "samples" and est["plan"]["micro_batch"] == 32  # 2048 / 64 replicas
        assert sum(est["memory_breakdown_bytes"].values()) == pytest.approx(est["memory_total_bytes"])
    plain, compressed = resnet_estimates["allreduce"], resnet_estimates["powersgd"]
    assert compressed["plan"]["dp_sync"].startswith("powersgd:rank=4")
    assert compressed["time_breakdown_s"]["compute"] == plain["time_breakdown_s"]["compute"]


def test_full_sharding_at_small_micro_batches_gathers_more() -> None:
    """ZeRO-3 regathers every unit each micro-batch: 32 micro-batches of 1 expose more than one of 32."""
    pytest.importorskip("transformers")
    from plait.engine.catalog import get_engine
    from plait.predict.intervals import step_interval_s
    from plait.workloads.traced.cost import estimate_traced

    work, cluster, engine = trace("plait.workload.zoo:resnet50"), get_cluster("dgx-a100-ib"), get_engine()
    small, whole = (estimate_traced(work, cluster, Plan(dp_shard=64, sharding="zero3", global_batch=2048,
                                                        micro_batch=mb), engine, step_interval_s) for mb in (1, 32))
    assert small.time.fsdp_comm_s > whole.time.fsdp_comm_s > 0
    with pytest.raises(ConfigError, match="tp=2: plait.workload.zoo:resnet50 has no Linear pair to split"):
        estimate_traced(work, cluster, Plan(tp=2, dp_replicate=32, global_batch=2048, micro_batch=32), engine,
                        step_interval_s)


def test_full_precision_plans_cost_a_float32_trace() -> None:
    """fp32 and tf32 store fp32: the estimate wants a float32 trace (one line otherwise); on it weights take 4 bytes
    a parameter, twice bf16's, and GEMMs run at the lower fp32 peak (A100: 19.5 of 312 TFLOP/s)."""
    pytest.importorskip("transformers")
    from plait.predict.intervals import step_interval_s
    from plait.workloads.traced.cost import estimate_traced
    from plait.workloads.traced.tracing import storage_dtype

    cluster, engine = get_cluster("dgx-a100-ib"), get_engine()
    plan = Plan(dp_replicate=8, micro_batch=64, global_batch=512, optimizer="sgd")
    half = trace("plait.workload.zoo:resnet50")
    with pytest.raises(ConfigError, match="precision=fp32 stores weights and activations in fp32: trace the model "
                                          "in float32 \\(it was traced in bfloat16\\)"):
        estimate_traced(half, cluster, replace(plan, precision="fp32"), engine, step_interval_s)
    full = trace("plait.workload.zoo:resnet50", dtype=storage_dtype("fp32"))
    bf16 = estimate_traced(half, cluster, plan, engine, step_interval_s)
    fp32, tf32 = (estimate_traced(full, cluster, replace(plan, precision=p), engine, step_interval_s)
                  for p in ("fp32", "tf32"))
    assert fp32.memory.weights_bytes == pytest.approx(2 * bf16.memory.weights_bytes)
    assert bf16.time.compute_s < tf32.time.compute_s < fp32.time.compute_s
    assert (fp32.peak_flops_per_gpu, tf32.peak_flops_per_gpu) == (19.5e12, 156e12)


def test_a_module_that_reads_tensor_values_is_refused_in_one_line() -> None:
    class Reads(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, x):  # type: ignore[no-untyped-def]
            return self.linear(x) if x.sum() > 0 else x  # a value the meta device does not hold

    with pytest.raises(ConfigError, match="code that reads tensor values cannot be traced") as caught:
        trace_factory(Reads, "reads", (4,))
    assert "\n" not in str(caught.value)


def test_dropout_is_traced_as_the_fused_kernel_a_gpu_runs() -> None:
    """``dropout`` in training is one CUDA kernel (``native_dropout``: reads the input, writes the output and a
    boolean mask) and one backward (reads the gradient and the mask, writes the input gradient), not the meta
    device's Bernoulli draw, scaling and product: per example of 8 float32 features, 8 x (4 + 4 + 1) = 72 bytes
    each way. At p = 0 it runs nothing."""

    def built(p: float) -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(p), torch.nn.Linear(8, 8))

    work = trace_factory(lambda: built(0.1), "dropout", (8,), "float32", "float32")
    kernels = [k for u in work.units for k in u.kernels]
    dropout = {k.name: k.bytes_per_example for k in kernels if "dropout" in k.name}
    assert dropout == {"native_dropout": 72.0, "native_dropout_backward": 72.0}
    assert not any(k.name in ("bernoulli_", "div_") for k in kernels)
    unused = trace_factory(lambda: built(0.0), "no dropout", (8,), "float32", "float32")
    assert not any("dropout" in k.name or k.name == "bernoulli_" for u in unused.units for k in u.kernels)


@pytest.mark.slow
def test_classic_data_parallel_rows_are_predicted_or_say_why() -> None:
    """plait validate --classic on the public ResNet-50 and BERT-large rows (plait/validate/data/classic_dp.md): every
    mixed-precision, TF32 and FP32 row on a system plait has a preset for is predicted (K80 and P100 included);
    the DGX-2H and DGX-1 BERT rows take the accumulation steps of their README's loss table (classic_dp.md); every
    other row says why in one line: its source states no batch per GPU."""
    pytest.importorskip("transformers")
    summary = _cli_json(["validate", "--classic", str(dataset_path("classic")), "--json"])
    rows = summary["results"]
    assert summary["rows_in_file"] == len(rows) == 114
    for row in rows:
        assert (row["error_pct"] is None) == bool(row["not_predicted"])
        assert "\n" not in row["not_predicted"]
    amp = [r for r in rows if " amp " in r["run"]]
    assert all(r["error_pct"] is not None for r in amp)
    full = [r for r in rows if re.search(r" (fp32|tf32) ", r["run"]) and r["error_pct"] is not None]
    assert {r["run"].split()[-4] for r in full} >= {"K80", "P100", "A100-SXM4-80GB"}
    assert len(amp) + len(full) == summary["rows"] == 112
    assert {r["not_predicted"] for r in rows} == {"", "the source states no batch per GPU"}
    assert set(summary["per_source"]) == {"DLE_PYT_RN50_2103", "DLE_PYT_RN50_1910", "DLE_TF_RN50_2006",
                                          "DLE_MX_RN50", "DLE_PYT_BERT_2111", "DLE_PYT_BERT_1907", "TF_BENCH_2017"}


def test_the_traced_search_ranks_fitting_plans_and_counts_the_rest() -> None:
    pytest.importorskip("transformers")
    from plait.engine.catalog import get_engine
    from plait.workloads.traced.search import search_traced

    work = trace("plait.workload.zoo:resnet50")
    result = search_traced(work, get_cluster("dgx1-v100"), 16, 16384, ("allreduce", "powersgd:rank=4"), get_engine())
    assert result.candidates == len(result.ranked) + sum(result.reasons.values())
    assert any("does not fit" in reason for reason in result.reasons)  # 1,024 images of 224^2 in 32 GB
    assert any("needs sharding='none'" in reason for reason in result.reasons)  # PowerSGD with ZeRO
    steps = [e.step_time_s * e.steps_multiplier for e in result.ranked]
    assert steps == sorted(steps)
    assert all(e.memory.total_bytes <= 0.95 * e.memory.capacity_bytes for e in result.ranked)
    assert {e.plan.pp for e in result.ranked} > {1}  # pipelines over the traced stages are searched too


def test_commands_without_traced_workloads_refuse_a_factory_by_name(tmp_path: Path) -> None:
    """Every command that takes catalog models only (plait simulate of a plan file) refuses a MODULE:FACTORY in one
    line naming it."""
    import contextlib
    import io

    from plait.cli.main import run_cli

    plan = tmp_path / "plan.toml"
    plan.write_text('[job]\nmodel = "plait.workload.zoo:resnet50"\n[plan]\ndp_replicate = 2\nglobal_batch = 4\n')
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        assert run_cli(["simulate", "--plan", str(plan)]) == 2
    assert err.getvalue().count("\n") == 1
    assert "'plait.workload.zoo:resnet50' is a module factory" in err.getvalue()
    assert "plait run trains its plan file" in err.getvalue()


def test_the_zoo_imports_transformers_without_third_party_noise() -> None:
    """A fresh process: ``transformers`` imports torchao where it is installed, whose CUDA kernels fail to load on
    a CPU build and whose enums make torch warn; none of that reaches the user's screen, the estimate does."""
    pytest.importorskip("transformers")
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "plait", "estimate", "--model", "plait.workload.zoo:resnet50",
                           "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and json.loads(done.stdout)["step_time_s"] > 0, done.stderr
    assert done.stderr == ""
