"""The GPU-only plan options: PyTorch's context parallelism (plait's own runs on CPU ranks), fp8 (torchao) and
async TP.

On this CPU: the refusals (one ``plait: error:`` line, exit 2, before any rank starts), fp8 training for
real (PyTorch 2.13's CPU runs ``torch._scaled_mm``), the objects each module builds (Float8Linear where
torchtitan's filter allows, the sequence shards and rope rows each cp rank keeps, the
dp x cp gradient groups, compiled blocks that match eager under TP+SP), and benchmarks/gpu_check.py's plan
list. The CUDA tests run the real thing where GPUs are visible.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from plait.errors import ConfigError
from plait.plan.plan import Plan
from plait.workload.catalog import resolve_model
from tests.ranks import run_ranks

ROOT = Path(__file__).parents[1]
MODEL = ROOT / "examples" / "tiny-model.toml"
CUDA = torch.cuda.is_available()
GPUS = torch.cuda.device_count() if CUDA else 0


def write_plan(path: Path, body: str, global_batch: int = 8) -> Path:
    path.write_text(f'[job]\nmodel = "{MODEL}"\n[plan]\nglobal_batch = {global_batch}\nmicro_batch = 2\n{body}\n')
    return path


def worker(nproc: int, plan: Path, metrics: Path, *extra: str) -> list[float]:
    out = run_ranks(nproc, ["-m", "plait.run.worker", "--plan", str(plan), "--metrics", str(metrics), *extra])
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line)["loss"] for line in metrics.read_text().splitlines()]


# --- refusals on this CPU ------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.skipif(CUDA, reason="the refusals are this CPU's")
@pytest.mark.parametrize(("body", "fragment"), [
    ("tp = 2\nsp = true\ntp_comm_overlap = true", "tp_comm_overlap=true is not supported by plait@0.1 on CPU: async TP"),
])
def test_plait_run_refuses_gpu_only_options_in_one_line(body: str, fragment: str, tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "plait", "run", "--plan", str(write_plan(tmp_path / "p.toml", body))],
                         capture_output=True, text=True, timeout=300, check=False)
    errors = [line for line in out.stderr.splitlines() if line.startswith("plait: error:")]
    assert out.returncode == 2 and len(errors) == 1 and fragment in errors[0], out.stderr[-2000:]
    assert "Traceback" not in out.stderr and "step 1" not in out.stderr + out.stdout


def test_fp8_is_refused_on_a_cpu_without_scaled_mm(monkeypatch: pytest.MonkeyPatch) -> None:
    from plait.run import float8

    monkeypatch.setattr(float8, "cpu_scaled_mm_works", lambda: False)
    with pytest.raises(ConfigError, match=r"precision=fp8: torch._scaled_mm does not run on this PyTorch's CPU"):
        float8.check_float8(Plan(precision="fp8"), on_gpu=False)


def test_checks_on_a_gpu() -> None:
    """On a CUDA machine the capability table (plait's engine, machine 'cuda') refuses the static limits of cp and
    async TP with the option named; the device-dependent checks stay with their modules."""
    from plait.engine.capability import first_unsupported
    from plait.engine.catalog import get_engine
    from plait.plan.rules import first_violation
    from plait.run.float8 import check_float8

    spec = resolve_model(str(MODEL))  # seq_len 64, head_dim 16, rope
    plait = get_engine("plait")
    assert first_unsupported(Plan(cp=2, seq_len=64), spec, plait, "cuda") is None
    assert "must be divisible by 2*cp=6" in first_violation(Plan(cp=3, seq_len=64), spec, _cluster())[1]
    for plan, fragment in ((Plan(cp=2, tp=2, seq_len=64), "DDP) over dp*cp=2 with tp=2"),
                           (Plan(tp_comm_overlap=True), "tp_comm_overlap=true with tp=1"),
                           (Plan(tp=2, tp_comm_overlap=True), "sp=false"),
                           (Plan(tp=2, sp=True, cp=2, tp_comm_overlap=True, dp_shard=1, sharding="zero3"), "with cp=2"),
                           (Plan(tp=2, sp=True, recompute="selective", tp_comm_overlap=True), "recompute='selective'")):
        message = first_unsupported(plan, spec, plait, "cuda")
        assert message and fragment in message and "plait@0.1" in message, (plan.describe(), message)
    assert first_unsupported(Plan(tp=2, sp=True, tp_comm_overlap=True), spec, plait, "cuda") is None
    check_float8(Plan(precision="fp8"), on_gpu=True, capability=(9, 0))
    with pytest.raises(ConfigError, match=r"compute capability >= 8.9\); this GPU is sm80"):
        check_float8(Plan(precision="fp8"), on_gpu=True, capability=(8, 0))


def _cluster():  # type: ignore[no-untyped-def]
    from plait.hardware.catalog import get_cluster

    return get_cluster("dgx-h100-ib")


# --- fp8 through torchao -------------------------------------------------------------------------------

def test_float8_converts_every_linear_but_the_output_projection() -> None:
    pytest.importorskip("torchao")
    from torch import nn
    from torchao.float8.float8_linear import Float8Linear

    from plait.run.float8 import convert_to_float8, convertible
    from plait.run.model import build_model

    spec = resolve_model(str(MODEL))
    model = build_model(spec, spec.seq_len, 0)
    assert convert_to_float8(model, Plan(precision="fp8")) == 7 * spec.num_layers  # q k v o w1 w2 w3
    assert type(model.output) is nn.Linear
    linears = [m for name, m in model.named_modules() if isinstance(m, nn.Linear) and name != "output"]
    assert linears and all(isinstance(m, Float8Linear) for m in linears)
    assert not convertible(nn.Linear(64, 24), "layers.0.attention.wq", tp=1)  # 24 is no multiple of 16
    assert not convertible(nn.Linear(64, 32), "layers.0.attention.wk", tp=4)  # its TP shard would be 8 wide


@pytest.mark.slow
@pytest.mark.skipif(CUDA, reason="the CPU fp8 path")
@pytest.mark.parametrize(("nproc", "body"), [(1, ""), (2, "tp = 2\nsp = true")])
def test_fp8_trains_on_this_cpu(nproc: int, body: str, tmp_path: Path) -> None:
    """torchao's Float8Linear forward and backward run here (torch._scaled_mm on CPU): the loss falls. One
    micro-batch a step: this CPU's ``_scaled_mm`` is a reference loop (~0.05 s for a 128x64x128 GEMM)."""
    from plait.run.float8 import cpu_scaled_mm_works

    pytest.importorskip("torchao")
    if not cpu_scaled_mm_works():
        pytest.skip("this PyTorch's CPU has no torch._scaled_mm")
    plan = write_plan(tmp_path / "plan.toml", f'precision = "fp8"\n{body}', global_batch=2)
    got = worker(nproc, plan, tmp_path / "m.jsonl", "--steps", "4")
    assert len(got) == 4 and all(math.isfinite(x) for x in got) and got[-1] < got[0]


# --- context parallelism and async TP objects, on 2 gloo ranks ------------------------------------------

def _ranks(rank: int, port: int, out: str) -> None:
    """Body of each spawned rank: build the cp and tp objects on gloo and record what they hold."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    import torch.distributed as dist

    from plait.run import async_tp, context
    from plait.run.mesh import build_mesh
    from plait.run.model import build_model
    from plait.run.parallel import apply_recompute, apply_tp
    from plait.run.train import cross_entropy

    dist.init_process_group("gloo")
    spec = resolve_model(str(MODEL))
    seq = spec.seq_len
    mesh = build_mesh(Plan(cp=2, global_batch=2, micro_batch=2, seq_len=seq))
    model = build_model(spec, seq, 0)
    cos = model.rope_cos.clone()
    inputs = torch.arange(2 * seq).view(2, seq).clone()
    targets = inputs + 1
    result: dict[str, object] = {"buffer_dims": context.cp_buffers([model], inputs, targets)[1]}
    with context.train_context([model], mesh, inputs, targets):
        result["inputs"] = inputs.tolist()
        result["rope_rows_match"] = bool(torch.equal(model.rope_cos, cos[inputs[0]]))
        # on this gloo mesh, plait's own ring replaces every attention core (context_parallel is the CUDA path)
        result["core_patched"] = all(b.attention.context_core is not None for b in model.layers.values())
    result["core_restored"] = all(b.attention.context_core is None for b in model.layers.values())
    result["rope_restored"] = bool(torch.equal(model.rope_cos, cos))
    result["targets_shape"] = list(targets.shape)
    result["fsdp_mesh"] = [context.fsdp_mesh(mesh).size(), list(context.fsdp_mesh(mesh).mesh_dim_names or ())]
    result["replica_group"] = dist.get_process_group_ranks(context.replica_group(mesh))
    result["mean_loss"] = context.mean_over_cp(float(rank + 1), mesh)
    tp_plan = Plan(tp=2, sp=True, global_batch=2, micro_batch=2, seq_len=seq, recompute="full")
    tp_mesh = build_mesh(tp_plan)
    x, y = (torch.randint(0, 256, (2, seq), generator=torch.Generator().manual_seed(s)) for s in (0, 1))
    losses = []
    for compiled in (False, True):
        part = build_model(spec, seq, 0)
        apply_tp(part, tp_mesh, tp_plan)
        apply_recompute(part, tp_plan)
        if compiled:  # async TP's compile path without symmetric memory (CUDA only): aot_eager on gloo
            async_tp.wait_before_blocks(part)
            async_tp.compile_blocks(part, backend="aot_eager")
        loss = cross_entropy(part(x), y)
        loss.backward()
        grad = part.layers["0"]._checkpoint_wrapped_module.feed_forward.w1.weight.grad.to_local()
        losses.append((float(loss), grad))
    result["compiled_loss_gap"] = abs(losses[0][0] - losses[1][0])
    result["compiled_grad_gap"] = float((losses[0][1] - losses[1][1]).abs().max())
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()
    from plait.run.lifecycle import exit_without_teardown

    exit_without_teardown(0)  # gloo's threads can abort interpreter teardown after the work is done (lifecycle.py)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    import torch.multiprocessing as mp

    out = tmp_path_factory.mktemp("ranks")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CUDA_VISIBLE_DEVICES", "")  # CPU meshes on gloo, also where GPUs are visible
        env.setenv("OMP_NUM_THREADS", "1")
        mp.spawn(_ranks, args=(port, str(out)), nprocs=2)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.slow
def test_context_parallel_shards_sequence_and_rope_head_tail(two_ranks: list[dict]) -> None:
    """Rank r keeps chunks r and 2cp-1-r of 2cp (torch's _HeadTailLoadBalancer), in tokens and rope rows."""
    seq, k = 64, 16  # tiny model: S = 64, cp = 2 -> 4 chunks of 16
    for rank, got in enumerate(two_ranks):
        positions = list(range(rank * k, (rank + 1) * k)) + list(range(seq - (rank + 1) * k, seq - rank * k))
        assert got["buffer_dims"] == [1, 1, 0, 0]  # inputs, targets, rope_cos, rope_sin
        assert got["inputs"] == [positions, [seq + p for p in positions]]
        assert got["rope_rows_match"] and got["core_patched"] and got["core_restored"]
        assert got["rope_restored"] and got["targets_shape"] == [2, seq // 2]  # batch stays sharded


def test_gradients_and_loss_reduce_over_dp_and_cp(two_ranks: list[dict]) -> None:
    for got in two_ranks:
        assert got["fsdp_mesh"] == [2, ["dp_shard_cp"]] and got["replica_group"] == [0, 1]
        assert got["mean_loss"] == pytest.approx(1.5)


def test_compiled_blocks_match_eager_under_tp_sp_and_full_recompute(two_ranks: list[dict]) -> None:
    for got in two_ranks:
        assert got["compiled_loss_gap"] < 1e-5 and got["compiled_grad_gap"] < 1e-5


# --- benchmarks/gpu_check.py -------------------------------------------------------------------------------

def _gpu_check():  # type: ignore[no-untyped-def]
    from tests.conftest import load_benchmark

    return load_benchmark("gpu_check")


def test_gpu_check_plans_are_well_formed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from plait.plan.io import read_plan_file
    from plait.run.support import check_runnable

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))  # as on an H200
    check = _gpu_check()
    model = tmp_path / "model.toml"
    model.write_text(check.MODEL_TOML)
    spec = resolve_model(str(model))
    assert 3.0e8 < 12 * spec.num_layers * spec.hidden_size**2 + 2 * spec.vocab_size * spec.hidden_size < 4.5e8
    assert len({c.name for c in check.CASES}) == len(check.CASES)
    for case in check.CASES:
        path = tmp_path / f"{case.name}.toml"
        path.write_text(check.plan_text(case, model))
        _, plan = read_plan_file(path)
        assert plan.num_gpus == case.nproc
        check_runnable(plan.with_seq_len(spec.seq_len), spec, on_gpu=True)  # an H200 refuses none of them
        step_s, memory_gib = check.predict(path)
        assert 0 < step_s < 10 and 0 < memory_gib < 141
    two = next(c for c in check.CASES if c.nproc == 2)
    assert check.skip_reason(two, gpus=1).startswith("needs 2 GPUs")


@pytest.mark.slow
@pytest.mark.skipif(CUDA, reason="the CPU stand-in")
def test_gpu_check_runs_a_case_end_to_end_here(tmp_path: Path) -> None:
    """The measuring path on this CPU with the tiny model: train, read the JSONL, predict, print a row."""
    check = _gpu_check()
    row = check.run_case(check.CASES[0], tmp_path, MODEL, timeout_s=300)
    assert row.startswith("bf16") and "prediction failed" not in row and "loss" in row


# --- on CUDA: the real thing -------------------------------------------------------------------------------

@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_fp8_trains_on_a_gpu(tmp_path: Path) -> None:
    pytest.importorskip("torchao")
    got = worker(1, write_plan(tmp_path / "plan.toml", 'precision = "fp8"'), tmp_path / "m.jsonl", "--steps", "8")
    assert all(math.isfinite(x) for x in got) and got[-1] < got[0]


@pytest.mark.skipif(GPUS < 2, reason="needs 2 CUDA GPUs")
def test_context_parallel_matches_one_gpu_in_fp32(tmp_path: Path) -> None:
    reference = worker(1, write_plan(tmp_path / "a.toml", ""), tmp_path / "a.jsonl", "--full-precision")
    got = worker(2, write_plan(tmp_path / "b.toml", "cp = 2"), tmp_path / "b.jsonl", "--full-precision")
    assert got == pytest.approx(reference, rel=1e-4)


@pytest.mark.skipif(GPUS < 2, reason="needs 2 CUDA GPUs")
def test_async_tp_matches_plain_tp_in_fp32(tmp_path: Path) -> None:
    reference = worker(2, write_plan(tmp_path / "a.toml", "tp = 2\nsp = true"), tmp_path / "a.jsonl",
                       "--full-precision")
    got = worker(2, write_plan(tmp_path / "b.toml", "tp = 2\nsp = true\ntp_comm_overlap = true"),
                 tmp_path / "b.jsonl", "--full-precision")
    assert got == pytest.approx(reference, rel=1e-4)
