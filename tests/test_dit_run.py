"""Sequence-parallel DiT inference on 2 gloo ranks: Ulysses gives one process's denoised latent, and
DistriFusion's stale patches stay within the derived bound of exact attention; every byte sent equals the cost
model's count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plait.workloads.dit.cost import stale_kv_gathers, stale_kv_sent_bytes, ulysses_sent_bytes
from tests.ranks import run_ranks

STEPS, LAYERS, HIDDEN, SIDE, BATCH = 4, 2, 64, 8, 2
TOKENS_PER_RANK = SIDE * SIDE // 2
FP32 = 4


def _run(tmp_path: Path, name: str, *extra: str) -> dict:  # type: ignore[type-arg]
    out = tmp_path / f"{name}.json"
    argv = ["-m", "plait.workloads.dit.worker", "--steps", str(STEPS), "--layers", str(LAYERS), "--hidden", str(HIDDEN),
            "--side", str(SIDE), "--batch", str(BATCH), *extra, "--out", str(out)]
    done = run_ranks(2, argv, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    from plait.run.config import read_config
    from plait.workloads.dit.worker import run
    from plait.run.workload_configs import DitConfig

    args = read_config(DitConfig, ["--ranks", "1", "--steps", str(STEPS), "--layers", str(LAYERS), "--hidden",
                                str(HIDDEN), "--side", str(SIDE), "--batch", str(BATCH), "--out", "unused"])
    return torch.tensor(run(args)["latent"])


def test_ulysses_denoises_as_one_process_and_sends_the_predicted_bytes(tmp_path: Path, reference) -> None:  # type: ignore[no-untyped-def]
    import torch

    result = _run(tmp_path, "ulysses", "--sp", "ulysses")
    torch.testing.assert_close(torch.tensor(result["latent"]), reference, atol=1e-5, rtol=0)
    per_layer = ulysses_sent_bytes(TOKENS_PER_RANK, HIDDEN, FP32, BATCH, 2)
    assert result["bytes_sent"] == [STEPS * LAYERS * per_layer] * 2


def test_distrifusion_is_exact_while_warm_and_within_the_bound_when_stale(tmp_path: Path, reference) -> None:  # type: ignore[no-untyped-def]
    import torch

    exact = _run(tmp_path, "warm", "--sp", "distrifusion", "--warmup", str(STEPS))
    torch.testing.assert_close(torch.tensor(exact["latent"]), reference, atol=1e-5, rtol=0)
    stale = _run(tmp_path, "stale", "--sp", "distrifusion", "--warmup", "1", "--check")
    errors = [pair for rank in stale["attention_errors"] for pair in rank]
    assert len(errors) == 2 * LAYERS * (STEPS - 1)  # every stale attention of both ranks was checked
    assert all(error <= bound for error, bound in errors)  # stale_attention_bound holds
    assert max(error for error, _ in errors) > 1e-3  # and staleness did change the attention
    latent = torch.tensor(stale["latent"])
    assert 0 < float((latent - reference).norm() / reference.norm()) < 0.05
    for result, warmup in ((exact, STEPS), (stale, 1)):
        per_gather = stale_kv_sent_bytes(TOKENS_PER_RANK, HIDDEN, FP32, BATCH, 2)
        assert result["bytes_sent"] == [LAYERS * stale_kv_gathers(STEPS, warmup) * per_gather] * 2


@pytest.mark.slow
def test_plait_run_denoises_a_dit_file_and_prints_its_bytes_against_the_prediction() -> None:
    """``plait run --model examples/dit-tiny.toml --parallel ulysses=2``: torchrun's two ranks, one process beside,
    each rank's bytes against the cost model's."""
    import re
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "plait", "run", "--model", "examples/dit-tiny.toml", "--parallel",
                           "ulysses=2"], check=False, cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    text = " ".join(done.stdout.split())
    pairs = re.findall(r"sent ([\d,]+) bytes, predicted ([\d,]+)", text)
    assert len(pairs) == 2 and all(a == b for a, b in pairs)
    assert float(re.search(r"max \|difference\| ([\d.e+-]+)", text).group(1)) < 1e-5  # type: ignore[union-attr]


@pytest.mark.parametrize("parallel", ["cfg=2", "ring=2", "tp=2", "pipefusion=2", "ulysses=2,offload=1"])
def test_plait_run_refuses_the_plans_xdit_runs_by_name(parallel: str) -> None:
    """Only Ulysses and DistriFusion alone run on CPU ranks; every other degree is refused before launch, naming
    the plan."""
    from plait.workloads.dit.predict import parse_dit_plan
    from tests.inprocess import cli

    code, _, err = cli(["run", "--model", "examples/dit-tiny.toml", "--parallel", parallel, "--dry-run"])
    assert code != 0 and f"--parallel {parse_dit_plan(parallel).label()}: plait run denoises" in err
