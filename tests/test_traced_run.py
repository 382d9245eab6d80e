"""A traced module's plans run: ``plait plan --model MODULE:FACTORY --export`` writes a plan file that ``plait run
--plan`` trains on gloo ranks (:mod:`plait.workloads.traced.run`), and every layout the traced planner ranks (data
parallelism, ZeRO stages, recomputation, pipeline stages and their combinations) equals one process training the
same global batch (:mod:`plait.workloads.traced.worker`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.inprocess import cli
from tests.ranks import run_ranks

pytest.importorskip("torch")

FACTORY = "plait.workload.zoo:small_cnn"
BASE = ["-m", "plait.workloads.traced.worker", "--factory", FACTORY, "--input-shape", "3,16,16", "--global-batch", "8",
        "--micro-batch", "2", "--steps", "3"]
MLP = ("--factory", "plait.workload.zoo:small_mlp", "--input-shape", "64")
"""The zoo model whose units hold Linear pairs (tensor parallelism), in place of the CNN."""


def _worker(tmp_path: Path, name: str, ranks: int, *extra: str) -> dict[str, object]:
    out = tmp_path / f"{name}.json"
    args = [*BASE, *extra, "--out", str(out)]
    if ranks == 1:
        from plait.workloads.traced.worker import main

        assert main(args[2:] + ["--reference"]) == 0
    else:
        result = run_ranks(ranks, args, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(out.read_text())  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.parametrize("layout", [
    ("ddp", 2, "adamw", ("--dp-replicate", "2")),
    ("zero1", 2, "sgd", ("--dp-shard", "2", "--sharding", "zero1")),
    ("zero2-recompute", 2, "adamw", ("--dp-shard", "2", "--sharding", "zero2", "--recompute-units", "-1")),
    ("zero3", 2, "sgd", ("--dp-shard", "2", "--sharding", "zero3", "--recompute-units", "2")),
    ("hsdp", 4, "adamw", ("--dp-replicate", "2", "--dp-shard", "2", "--sharding", "zero3")),
    ("pp", 2, "adamw", ("--pp", "2", "--stage-starts", "3")),
    ("pp-gpipe-recompute", 2, "sgd", ("--pp", "2", "--stage-starts", "2", "--schedule", "gpipe",
                                      "--recompute-units", "-1")),
    ("pp-ddp", 4, "adamw", ("--pp", "2", "--stage-starts", "3", "--dp-replicate", "2")),
    ("pp-zero3", 4, "adamw", ("--pp", "2", "--stage-starts", "3", "--dp-shard", "2", "--sharding", "zero3")),
    # ColwiseParallel / RowwiseParallel on small_mlp's Linear pairs, in each of 2 pipeline stages (tp alone and
    # beside DDP: test_tp2_by_dp2_equals_one_process_and_hands_the_predicted_bytes)
    ("tp-pp", 4, "adamw", (*MLP, "--tp", "2", "--pp", "2", "--stage-starts", "3")),
], ids=lambda layout: f"{layout[0]}-{layout[2]}")
def test_each_layout_equals_one_process(tmp_path: Path, layout: tuple[str, int, str, tuple[str, ...]]) -> None:
    name, ranks, optimizer, extra = layout
    model = MLP if extra[:len(MLP)] == MLP else ()
    reference = _worker(tmp_path, "reference", 1, "--optimizer", optimizer, *model)
    run = _worker(tmp_path, name, ranks, "--optimizer", optimizer, *extra)
    assert run["ranks"] == ranks
    assert run["losses"] == pytest.approx(reference["losses"], rel=1e-5, abs=1e-6)
    assert run["parameter_sum"] == pytest.approx(reference["parameter_sum"], rel=1e-5)
    # the weights moved: the comparison is not of two untrained models
    untrained = _worker(tmp_path, "untrained", 1, "--optimizer", optimizer, *model, "--steps", "0")
    assert abs(run["parameter_sum"] - untrained["parameter_sum"]) > 1e-3  # type: ignore[operator]


@pytest.mark.slow
def test_tp2_by_dp2_equals_one_process_and_hands_the_predicted_bytes(tmp_path: Path) -> None:
    """small_mlp's pairs split over 2 adjacent ranks, 2 such groups under DDP (4 ranks): the same losses and weights
    as one process, and each step rank 0 hands its TP all-reduces and DDP's buckets the bytes the cost model
    predicts (:func:`plait.workloads.traced.cost.collective_bytes_per_step`)."""
    from plait.plan.plan import Plan
    from plait.workloads.traced.cost import collective_bytes_per_step
    from plait.workloads.traced.tracing import trace

    reference = _worker(tmp_path, "reference", 1, *MLP, "--steps", "2")  # 4 ranks on 2 cores: few steps
    run = _worker(tmp_path, "tp2-dp2", 4, *MLP, "--tp", "2", "--dp-replicate", "2", "--steps", "2")
    assert run["ranks"] == 4
    assert run["losses"] == pytest.approx(reference["losses"], rel=1e-5, abs=1e-6)
    assert run["parameter_sum"] == pytest.approx(reference["parameter_sum"], rel=1e-5)
    untrained = _worker(tmp_path, "untrained", 1, *MLP, "--steps", "0")
    assert abs(run["parameter_sum"] - untrained["parameter_sum"]) > 1e-3  # type: ignore[operator]
    plan = Plan(tp=2, sp=False, dp_replicate=2, micro_batch=2, global_batch=8, precision="fp32")
    tp_bytes, dp_bytes = collective_bytes_per_step(trace(MLP[1], (64,), None, "float32"), plan)
    assert run["tp_bytes_per_step"] == [tp_bytes] * 2 and run["dp_bytes_per_step"] == [dp_bytes] * 2


@pytest.mark.slow
def test_tp2_split_attention_equals_one_process_and_hands_the_predicted_bytes(tmp_path: Path) -> None:
    """small_transformer's attentions split by heads (q, k, v column-parallel, the output projection row-parallel)
    and its MLP pairs, over 2 ranks: the same losses and weights as one process, and each step rank 0 hands its TP
    all-reduces the bytes the cost model predicts (one forward and one backward per attention and pair)."""
    from plait.plan.plan import Plan
    from plait.workloads.traced.cost import collective_bytes_per_step
    from plait.workloads.traced.tracing import trace

    model = ("--factory", "plait.workload.zoo:small_transformer", "--input-shape", "8,32", "--global-batch", "4")
    reference = _worker(tmp_path, "reference", 1, *model, "--steps", "2")
    run = _worker(tmp_path, "tp2", 2, *model, "--tp", "2", "--steps", "2")
    assert run["ranks"] == 2
    assert run["losses"] == pytest.approx(reference["losses"], rel=1e-5, abs=1e-6)
    assert run["parameter_sum"] == pytest.approx(reference["parameter_sum"], rel=1e-5)
    assert abs(run["losses"][1] - run["losses"][0]) > 1e-3  # type: ignore[index]  # the first step moved the weights
    plan = Plan(tp=2, sp=False, micro_batch=2, global_batch=4, precision="fp32")
    tp_bytes, _ = collective_bytes_per_step(trace(model[1], (8, 32), None, "float32"), plan)
    assert run["tp_bytes_per_step"] == [tp_bytes] * 2


@pytest.mark.slow
@pytest.mark.parametrize("method", ["bf16", "local_sgd:every=2"])
def test_synchronization_methods_train_whole_replicas(tmp_path: Path, method: str) -> None:
    """The traced planner's ``--dp-sync`` plans (unsharded replicas) run on the transformer runtime's pieces: the
    first step's loss is the untrained model's, and training lowers it (the objective is the output's mean)."""
    reference = _worker(tmp_path, "reference", 1)
    run = _worker(tmp_path, method.split(":")[0], 2, "--dp-replicate", "2", "--dp-sync", method)
    losses = [x for x in run["losses"] if x == x]  # type: ignore[union-attr]
    assert losses[0] == pytest.approx(reference["losses"][0], rel=1e-6)  # type: ignore[index]
    assert losses[-1] < losses[0]


def test_export_writes_a_runnable_plan_file(tmp_path: Path) -> None:
    code, out, err = cli(["plan", "--model", FACTORY, "--gpus", "2", "--global-batch", "8", "--export",
                          str(tmp_path / "out")])
    assert code == 0, err
    raw = tomllib.loads((tmp_path / "out" / "plan.toml").read_text())
    assert raw["job"]["model"] == FACTORY and raw["job"]["engine"] == "plait"
    assert raw["job"]["input_shape"] == [3, 32, 32] and raw["job"]["input_dtype"] == "float32"
    assert raw["plan"]["global_batch"] == 8
    code, out, err = cli(["run", "--plan", str(tmp_path / "out" / "plan.toml"), "--dry-run"])
    assert code == 0, err
    assert "on 2 CPU ranks (gloo)" in out


@pytest.mark.parametrize(("plan", "option", "message"), [
    ("pp = 2\ndp_replicate = 2\nmicro_batch = 2\nglobal_batch = 8\ndp_sync = 'local_sgd:every=4'\n", [],
     "dp_sync=local_sgd:every=4 with pp=2: plait run synchronizes a traced module's pipeline replicas"),
    ("dp_replicate = 2\nmicro_batch = 2\nglobal_batch = 8\n", ["--checkpoint-every", "2"], "--checkpoint-every:"),
])
def test_what_the_runtime_cannot_run_is_refused_in_one_line(tmp_path: Path, plan: str, option: list[str],
                                                             message: str) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(f'[job]\nmodel = "{FACTORY}"\ninput_shape = [3, 16, 16]\n\n[plan]\n{plan}')
    code, out, err = cli(["run", "--plan", str(path), "--dry-run", *option])
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_plait_run_trains_the_example_plan(tmp_path: Path) -> None:
    """README's command: the shipped traced plan file, trained by ``plait run`` (torchrun, 2 ranks), measured beside
    its prediction."""
    plan = Path(__file__).parents[1] / "examples" / "small-cnn-plan.toml"
    done = subprocess.run([sys.executable, "-m", "plait", "run", "--plan", str(plan), "--steps", "3"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "step time s (median after step 1)" in done.stdout and "final loss" in done.stdout
