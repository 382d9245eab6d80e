"""What ``plait run`` says and the exit code it ends with, without starting a rank: torchrun's own log lines (as
torch 2.x writes them, copied from real runs) read by :class:`plait.run.narration.Watch`; ``--nodes`` and
``--metrics`` checked before launch, and a metrics file that exists appended to."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from plait.run.narration import Watch

ROOT = Path(__file__).parents[1]
PLAN = ROOT / "examples" / "tiny-plan.toml"

# torchrun's lines, verbatim from a 2-rank run whose rank 1 called os._exit(5) at step 3 and was restarted
FAILED_5 = ("E1206 03:54:09.794000 6343 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 5) "
            "local_rank: 1 (pid: 6404) of binary: /work/main/.venv/bin/python\n")
CLOSING = ("W1206 03:54:09.780000 6343 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 6401 "
           "closing signal SIGTERM\n")
# the last line of torchrun's traceback after `kill -TERM <torchrun>`
LAUNCHER_TERM = "torch.distributed.elastic.multiprocessing.api.SignalException: Process 7045 got signal: 15\n"


def _failed(code: int, rank: int = 0) -> str:
    return FAILED_5.replace("exitcode: 5", f"exitcode: {code}").replace("local_rank: 1", f"local_rank: {rank}")


def test_a_restart_is_said_with_the_rank_and_its_exception() -> None:
    watch = Watch(max_restarts=2)
    assert watch.read("[rank1]: Traceback (most recent call last):\n") is None
    assert watch.read("[rank1]: ValueError: boom\n") is None
    assert watch.read(CLOSING) is None
    note = watch.read(FAILED_5)
    assert note == ("plait: rank 1 failed (exit code 5): ValueError: boom; restart 1 of 2: every rank starts again "
                    "from the newest checkpoint")
    assert watch.read(_failed(-9, rank=0)) == ("plait: rank 0 failed (killed by SIGKILL); restart 2 of 2: every rank "
                                               "starts again from the newest checkpoint")
    assert watch.read(FAILED_5) is None  # restarts spent: the ending says it
    assert watch.ending(1) == (1, "rank 1 failed (exit code 5) without an exception; the other ranks then lost "
                                  "their peer")


@pytest.mark.parametrize(("rank_code", "said", "expected"), [
    (3, "plait: error: step 3: the gradient norm is nan; the run stops\n", 3),  # --on-nonfinite stop
    (2, "plait: error: vocab_size=8 must be >= 256 (byte tokens)\n", 2),  # a rank refused its input
    (5, None, 1),  # a crash: torchrun's own code
    (-9, None, 1),  # a rank killed
])
def test_the_exit_code_is_the_ranks_documented_one(rank_code: int, said: str | None, expected: int) -> None:
    watch = Watch()
    if said:
        watch.read(said)
    watch.read(_failed(rank_code))
    code, line = watch.ending(1)  # torchrun exits 1 whatever its ranks' codes
    assert code == expected
    assert (line is None) == (said is not None)  # the rank's own line was already shown


@pytest.mark.parametrize(("lines", "launcher_code", "expected", "fragment"), [
    ([], -9, 137, "the launcher (torchrun) was killed by SIGKILL, not a rank"),
    ([CLOSING, _failed(-15), LAUNCHER_TERM], 1, 143, "the launcher (torchrun) was stopped by SIGTERM, not a rank"),
])
def test_the_launchers_death_is_named_as_such(lines: list[str], launcher_code: int, expected: int,
                                              fragment: str) -> None:
    watch = Watch()
    for line in lines:
        watch.read(line)
    code, said = watch.ending(launcher_code)
    assert code == expected and said is not None and fragment in said


def _cli(argv: list[str]) -> tuple[int, str, str]:
    from plait.cli.main import run_cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run_cli(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(("options", "fragment"), [
    (["--nodes", "0"], "'--nodes': 0 is not in the range 1<=x"),
    (["--nodes", "-1"], "'--nodes': -1 is not in the range 1<=x"),
    (["--nodes", str(2**64)], f"'--nodes': {2**64} is not in the range 1<=x"),
    (["--nodes", "3"], "--nodes=3 must divide the plan's gpus=2"),
    (["--nodes", "2", "--engine", "torchtitan"], "--nodes=2: plait run launches torchtitan on this node only"),
    (["--metrics", "{tmp}"], "must be a file in an existing folder"),
    (["--metrics", "{tmp}/missing/m.jsonl"], "must be a file in an existing folder"),
])
def test_bad_nodes_and_metrics_are_one_line_exit_2(options: list[str], fragment: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from plait.run import plan_run

    monkeypatch.setattr(plan_run, "run_local", lambda *a: pytest.fail("launched"))
    code, _, err = _cli(["run", "--plan", str(PLAN), *(o.format(tmp=tmp_path) for o in options)])
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1, err


def test_nodes_with_a_model_toml_are_refused() -> None:
    code, _, err = _cli(["run", "--model", str(ROOT / "examples" / "dlrm-small.toml"), "--nodes", "2"])
    assert code == 2 and "--nodes=2: a --model TOML runs on this node only" in err


def test_an_existing_metrics_file_is_appended_to_and_only_this_runs_rows_reported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from plait.run import plan_run
    from plait.run.config import read_config
    from plait.run.worker_config import WorkerConfig

    metrics = tmp_path / "m.jsonl"
    earlier = {"step": 1, "loss": 9.0, "grad_norm": 1.0, "step_time_s": 99.0, "tokens_per_s": 1.0,
               "peak_memory_bytes": 2**40}
    metrics.write_text(json.dumps(earlier) + "\n")

    def launch(config_file: Path, gpus: int, restarts: int, log_folder: Path) -> int:
        config = read_config(WorkerConfig, ["--config", str(config_file)])
        assert config.metrics == metrics and log_folder == tmp_path  # the run's folder: the metrics file's
        with config.metrics.open("a") as rows:
            for step in (1, 2):
                rows.write(json.dumps({**earlier, "step": step, "loss": 5.0, "step_time_s": 0.5,
                                       "peak_memory_bytes": 3 * 2**20}) + "\n")
        return 0

    monkeypatch.setattr(plan_run, "run_local", launch)
    code, out, err = _cli(["run", "--plan", str(PLAN), "--metrics", str(metrics), "--full-precision"])
    assert code == 0, err
    out = " ".join(out.split())  # the console wraps long lines
    assert f"appending this run's steps to {metrics}" in out
    assert len(metrics.read_text().splitlines()) == 3  # the earlier row kept
    assert "3.00 MiB" in out and "1.00 TiB" not in out and "0.5000" in out  # this run's rows only
