"""The precision `plait run` and `plait calibrate` compute in on a CPU (emulated bf16 took 15 s a step
on an AVX2-only CPU, against fp32's fraction of a second)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from plait.run import precision
from plait.run.precision import cpu_fallback_note, cpu_runs_natively

SAPPHIRE_RAPIDS = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile avx512_fp16\n"
ZEN3 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n"
NEOVERSE_V2 = "processor\t: 0\nFeatures\t: fp asimd sve sve2 bf16 i8mm\n"


def test_native_precisions_follow_the_cpu_flags() -> None:
    assert cpu_runs_natively("bf16", SAPPHIRE_RAPIDS) and cpu_runs_natively("fp16", SAPPHIRE_RAPIDS)
    assert not cpu_runs_natively("bf16", ZEN3) and not cpu_runs_natively("fp16", ZEN3)
    assert cpu_runs_natively("bf16", NEOVERSE_V2) and not cpu_runs_natively("fp16", NEOVERSE_V2)
    assert cpu_runs_natively("fp32", ZEN3) and cpu_runs_natively("fp8", ZEN3)  # fp8: kept as asked
    assert cpu_fallback_note("bf16", SAPPHIRE_RAPIDS) is None
    assert "training in fp32" in (cpu_fallback_note("bf16", ZEN3) or "")


def test_run_trains_in_fp32_where_bf16_is_emulated(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a CPU without native bf16, `plait run` says so and passes --full-precision to every rank."""
    from plait.cli.main import run_cli
    from plait.run import plan_run
    from plait.run.config import read_config
    from plait.run.worker_config import WorkerConfig

    launched: list[WorkerConfig] = []
    monkeypatch.setattr(precision, "_cpuinfo", lambda: ZEN3)
    monkeypatch.setattr(plan_run, "run_local", lambda config, gpus, restarts, log_folder: launched.append(
        read_config(WorkerConfig, ["--config", str(config)])) or 0)
    plan = Path(__file__).resolve().parents[1] / "examples" / "tiny-plan.toml"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert run_cli(["run", "--plan", str(plan), "--dry-run"]) == 0
    assert "no native bf16" in out.getvalue() and launched[0].full_precision
    monkeypatch.setattr(precision, "_cpuinfo", lambda: SAPPHIRE_RAPIDS)
    with contextlib.redirect_stdout(io.StringIO()):
        assert run_cli(["run", "--plan", str(plan), "--dry-run"]) == 0
    assert not launched[1].full_precision
