"""Guard rails of ``plait run``: a non-finite step stops the run with a non-zero exit code (or is
skipped when asked), and a plan this machine cannot hold is refused before any rank starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).parents[1]
MODEL = ROOT / "examples" / "tiny-model.toml"


def _plan(tmp_path: Path, body: str, model: str = str(MODEL), global_batch: int = 8) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(f'[job]\nmodel = "{model}"\n[plan]\nglobal_batch = {global_batch}\nmicro_batch = 2\n{body}\n')
    return path


def _run(plan: Path, *extra: str, nan_at: int | str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if nan_at is not None:
        env["PLAIT_TEST_NAN_AT_STEP"] = str(nan_at)  # STEP, or STEP@RANK for that rank only
    return subprocess.run([sys.executable, "-m", "plait", "run", "--plan", str(plan), "--cluster", "dgx-h100-ib",
                           *extra], capture_output=True, text=True, timeout=600, env=env)


def test_a_non_finite_step_stops_the_run_with_exit_code_3_and_its_log_in_the_runs_folder(tmp_path: Path) -> None:
    metrics = tmp_path / "m.jsonl"
    out = _run(_plan(tmp_path, "dp_replicate = 2"), "--steps", "6", "--metrics", str(metrics), nan_at=3)
    assert out.returncode == 3, out.stderr[-2000:]  # as `plait run --help` says (torchrun itself exits 1)
    assert "plait: error: step 3: the gradient norm is nan" in out.stderr
    assert len(metrics.read_text().splitlines()) == 2  # steps 1 and 2; step 3 never updated the weights
    log = tmp_path / "plait-run.log"  # the metrics file's folder, not /tmp
    assert out.stderr.strip().splitlines()[-1] == f"plait: the ranks' full output: {log}"
    assert "exitcode: 3" in log.read_text()


@pytest.mark.slow
def test_a_non_finite_step_can_be_skipped(tmp_path: Path) -> None:
    """Under local SGD each replica clips by its own norm: rank 1's step 3 alone is non-finite, and both replicas
    skip it (rank 0 writes the metrics), so their averaging steps stay paired and the run ends."""
    metrics = tmp_path / "m.jsonl"
    out = _run(_plan(tmp_path, 'dp_replicate = 2\ndp_sync = "local_sgd:every=2"'), "--steps", "5", "--metrics",
               str(metrics), "--on-nonfinite", "skip", nan_at="3@1")
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]  # strict JSON: null, not NaN
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5] and rows[2]["grad_norm"] is None
    assert all(r["grad_norm"] is not None and r["loss"] is not None for r in rows[3:])  # the weights stayed finite


def test_more_ranks_than_the_cores_take_are_refused_before_launch(tmp_path: Path) -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    ranks = 4 * cores
    out = _run(_plan(tmp_path, f"dp_replicate = {ranks}", global_batch=2 * ranks), "--steps", "1")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"the plan needs {ranks} ranks but this CPU machine has {cores} cores" in out.stderr


def test_a_plan_that_does_not_fit_in_host_memory_is_refused_before_launch(tmp_path: Path) -> None:
    out = _run(_plan(tmp_path, "dp_replicate = 2", model="llama3.1-405b"), "--steps", "1")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "(plait's estimate) but this machine has" in out.stderr


def test_checkpoint_options_without_a_folder_are_refused(tmp_path: Path) -> None:
    out = _run(_plan(tmp_path, "dp_replicate = 2"), "--resume")
    assert out.returncode == 2 and "need --checkpoint-dir" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow
def test_a_failed_rank_is_one_line_naming_it_and_the_log(tmp_path: Path) -> None:
    env = dict(os.environ, PLAIT_TEST_FAIL_AT_STEP="2")
    out = subprocess.run([sys.executable, "-m", "plait", "run", "--plan", str(_plan(tmp_path, "dp_replicate = 2")),
                          "--steps", "4", "--cluster", "dgx-h100-ib"], capture_output=True, text=True, timeout=600,
                         env=env, cwd=tmp_path)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("plait: error:")]
    assert len(errors) == 1 and "rank 1 failed (exit code 5)" in errors[0]
    log = Path(errors[0].rsplit("full output: ", 1)[1])
    assert log == tmp_path / "plait-run.log"  # no checkpoint or metrics folder: the current one
    assert "Traceback" in log.read_text() and "exitcode: 5" in log.read_text()  # torchrun's report is kept there
