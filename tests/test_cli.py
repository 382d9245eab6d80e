"""The command line: real predictions, JSON shape, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from plait.validate.datasets import dataset_path

DEV_CSV = dataset_path("dev")


def plait(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "plait", *args], capture_output=True, text=True, timeout=120)


def test_estimate_defaults_prints_a_prediction() -> None:
    out = plait("estimate")
    assert out.returncode == 0, out.stderr
    assert "Step time" in out.stdout and "MFU" in out.stdout and "GPU-hours" in out.stdout


def test_estimate_json_shape() -> None:
    out = plait("estimate", "--model", "llama3-70b", "--gpus", "64", "--tp", "8", "--pp", "2", "--sharding", "zero1",
                "--global-batch", "64", "--recompute", "selective", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["num_gpus"] == 64 and doc["plan"]["tp"] == 8 and doc["plan"]["dp_shard"] == 4
    assert doc["step_time_s"] == pytest.approx(sum(doc["time_breakdown_s"].values()))
    assert 0 < doc["mfu"] < 1 and doc["fits"] in (True, False)


def test_estimate_simulate_times_the_pipeline_by_the_event_simulation() -> None:
    from plait.engine.catalog import get_engine
    from plait.hardware.catalog import get_cluster
    from plait.job import Job
    from plait.plan.plan import Plan
    from plait.simulate.step import simulate_step
    from plait.workload.catalog import get_model

    args = ["estimate", "--model", "llama3-70b", "--gpus", "64", "--tp", "8", "--pp", "4", "--vpp", "2",
            "--schedule", "interleaved", "--sharding", "zero1", "--global-batch", "64", "--json"]
    closed, simulated = (json.loads(plait(*a).stdout)["step_time_s"] for a in (args, [*args, "--simulate"]))
    plan = Plan(tp=8, sp=True, pp=4, vpp=2, schedule="interleaved", dp_shard=2, sharding="zero1", global_batch=64)
    timeline = simulate_step(Job.build(get_model("llama3-70b"), get_cluster("dgx-h100-ib"), plan, get_engine()))
    assert simulated == pytest.approx(timeline.step_time_s, rel=1e-6)
    assert closed == pytest.approx(simulated, rel=0.02) and closed != simulated


def test_estimate_reads_a_plan_file(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text('[job]\nmodel = "llama3-8b"\ncluster = "dgx-a100-ib"\ngpus = 16\n\n'
                    '[plan]\ntp = 2\nsp = true\ndp_shard = 8\nsharding = "zero3"\nglobal_batch = 64\n')
    out = plait("estimate", "--plan", str(plan), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["num_gpus"] == 16


def test_plan_that_does_not_fit_still_reports_memory() -> None:
    out = plait("estimate", "--model", "llama3.1-405b", "--gpus", "8", "--sharding", "none", "--global-batch", "8")
    assert out.returncode == 0, out.stderr
    assert "does not fit" in out.stdout and "exceeds by" in out.stdout and "activations" in out.stdout


@pytest.mark.parametrize("args,fragment", [
    (["estimate", "--model", "no-such-model"], "unknown model 'no-such-model'"),
    (["estimate", "--tp", "3", "--gpus", "24"], "tp=3 must divide num_heads=32"),
    (["estimate", "--gpus", "10", "--tp", "4"], "gpus=10 must be divisible by tp*pp*cp"),
    (["estimate", "--micro-batch", "0"], "micro_batch=0 must be > 0"),
    (["estimate", "--global-batch", "-8"], "must"),
    (["estimate", "--cluster", "nowhere"], "unknown cluster 'nowhere'"),
    (["estimate", "--precision", "fp8", "--cluster", "dgx-a100-ib"], "precision=fp8 is not supported"),
    (["estimate", "--sharding", "zero9"], "sharding='zero9' must be one of"),
])
def test_bad_input_is_one_line_exit_2(args: list[str], fragment: str) -> None:
    out = plait(*args)
    assert out.returncode == 2
    assert fragment in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_malformed_plan_toml(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[plan\ntp = 2\n")
    out = plait("estimate", "--plan", str(bad))
    assert out.returncode == 2 and "is not valid TOML" in out.stderr and "Traceback" not in out.stderr
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("[plan]\ntensor_parallel = 2\n")
    out = plait("estimate", "--plan", str(unknown))
    assert out.returncode == 2 and "unknown key 'tensor_parallel'" in out.stderr


def test_malformed_csv(tmp_path: Path) -> None:
    missing = tmp_path / "missing.csv"
    missing.write_text("a,b\n1,2\n")
    out = plait("validate", "--runs", str(missing))
    assert out.returncode == 2 and "lacks column 'id'" in out.stderr
    header = DEV_CSV.read_text().splitlines()[0]
    row = DEV_CSV.read_text().splitlines()[1].replace(",24,2304,", ",twenty,2304,", 1)
    broken = tmp_path / "broken.csv"
    broken.write_text(header + "\n" + row + "\n")
    out = plait("validate", "--runs", str(broken))
    assert out.returncode == 2 and "column layers='twenty' must be an integer" in out.stderr


def test_catalog_listings() -> None:
    models = plait("models", "--json")
    assert models.returncode == 0 and any(m["slug"] == "deepseek-v3" for m in json.loads(models.stdout))
    clusters = plait("clusters", "--json")
    assert clusters.returncode == 0 and len(json.loads(clusters.stdout)["clusters"]) >= 11


def test_progress_bar_shows_candidates_per_second(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import io

    from rich.console import Console

    from plait import progress

    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with progress.LazyProgress("searching plans", console=console) as bar:
        bar(500, 1000)
        bar(1000, 1000)
    assert "candidates/s" in out.getvalue() and "1000/1000" in out.getvalue()


def _in_process(*argv: str) -> tuple[int, str, str]:
    import contextlib
    import io

    from plait.cli.main import run_cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run_cli(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("options, table", [
    ([], ""),                                                      # 8 GPUs: FSDP over all of them, 128 sequences
    (["--tp", "2"], "tp = 2\n"),                                   # sequence parallelism on with tp
    (["--sharding", "none"], 'sharding = "none"\n'),               # DDP
    (["--dp-replicate", "2"], "dp_replicate = 2\n"),               # HSDP 2 x 4
    (["--gpus", "1"], ""),                                         # nothing to shard: no sharding
])
def test_plan_files_and_the_command_line_share_their_defaults(tmp_path: Path, options: list[str], table: str) -> None:
    """The same layout stated as options or as a plan file with the same keys is the same plan (they once
    differed in global_batch, 1 vs 128, and sharding, none vs zero3)."""
    gpus = options[options.index("--gpus") + 1] if "--gpus" in options else "8"
    path = tmp_path / "plan.toml"
    path.write_text(f'[job]\ngpus = {gpus}\n[plan]\n{table}')
    cli, file = (json.loads(_in_process("estimate", *args, "--json")[1])["plan"]
                 for args in (options, ["--plan", str(path)]))
    assert cli == file
    assert cli["global_batch"] == 128 and cli["dp_replicate"] * cli["dp_shard"] * cli["tp"] == int(gpus)
    assert cli["sharding"] == ("zero3" if cli["dp_shard"] > 1 else "none") and cli["sp"] == (cli["tp"] > 1)


def test_paths_in_a_plan_file_are_relative_to_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan file naming `model = "tiny-model.toml"` reads the model beside it, from any working directory;
    `plait plan --export` writes the paths relative to the export folder, so the plan it writes reads back."""
    root = Path(__file__).resolve().parents[1]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, out, err = _in_process("estimate", "--plan", str(root / "examples" / "tiny-plan.toml"), "--json")
    assert code == 0, err
    assert json.loads(out)["model"] == "tiny-llama"
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny.toml").write_text((root / "examples" / "tiny-model.toml").read_text())
    monkeypatch.chdir(tmp_path)
    code, _, err = _in_process("plan", "--model", "models/tiny.toml", "--gpus", "2", "--global-batch", "8",
                               "--engine", "plait", "--export", "out/run")
    assert code == 0, err
    written = (tmp_path / "out" / "run" / "plan.toml").read_text()
    assert 'model = "../../models/tiny.toml"' in written
    monkeypatch.chdir(elsewhere)
    code, out, err = _in_process("estimate", "--plan", str(tmp_path / "out" / "run" / "plan.toml"), "--json")
    assert code == 0, err


def test_plan_arguments_are_checked_before_the_search(tmp_path: Path) -> None:
    """`--top 0` and an export path that is a file are refused at once (before: "no plan fits", and a
    FileExistsError traceback after the search)."""
    (tmp_path / "a_file").write_text("keep")
    for argv, message in ((["--top", "0"], "'--top': 0 is not in the range 1<=x"),
                          (["--export", str(tmp_path / "a_file")], "is a file, not a folder"),
                          (["--export", str(tmp_path / "a_file" / "sub")], "is a file")):
        code, _, err = _in_process("plan", "--gpus", "8", *argv)
        assert code == 2 and message in err and err.count("\n") == 1, err
    assert (tmp_path / "a_file").read_text() == "keep"


def test_option_parser_errors_are_one_line() -> None:
    """An unknown option or a non-numeric value is one `plait: error:` line with exit code 2, like every
    other user mistake (before: click's boxed usage message)."""
    for argv, message in ((["estimate", "--gpus", "x"], "'x' is not a valid int"),
                          (["estimate", "--bogus"], "No such option: --bogus"), (["bogus"], "No such command"),
                          (["estimate", "--plan", "\x00"], "contains a NUL byte")):  # os.stat raised ValueError
        code, out, err = _in_process(*argv)
        assert code == 2 and err.startswith("plait: error: ") and message in err and err.count("\n") == 1, err


@pytest.mark.parametrize("argv, flag", [(["estimate", "--tp", "-1"], "--tp -1"),
                                        (["estimate", "--global-batch", "64"], "--global-batch 64"),
                                        (["simulate", "--gpus", "4"], "--gpus 4"),
                                        (["report", "--recompute", "full"], "--recompute full")])
def test_a_layout_option_beside_a_plan_file_is_refused(argv: list[str], flag: str) -> None:
    """A plan file states its layout: a layout option beside --plan, which the command would ignore, is refused
    in one line naming it (before: exit 0, the option silently dropped)."""
    plan = str(Path(__file__).resolve().parents[1] / "examples" / "tiny-plan.toml")
    code, _, err = _in_process(argv[0], "--plan", plan, *argv[1:])
    assert code == 2 and err.startswith(f"plait: error: {flag}: the plan file") and err.count("\n") == 1, err


def test_a_command_that_imported_torch_ends_without_leak_reports() -> None:
    """plait freezes the objects it holds before exiting (plait.cli.main), except where torch was imported: triton's
    nanobind bindings then report every object still held, some 30 lines on stderr (a traced estimate did)."""
    code = "import sys, torch.utils.flop_counter; sys.argv = ['plait', 'models']; from plait.cli.main import main; main()"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0 and "leaked" not in out.stderr, out.stderr[-2000:]


@pytest.mark.parametrize("argv", [["estimate", "--json"], ["models"], []])  # print, rich console, click's help
@pytest.mark.parametrize("unbuffered", ["1", ""])  # a write fails at once, or the flush at exit does
def test_a_reader_that_closes_the_pipe_early_ends_plait_quietly(argv: list[str], unbuffered: str) -> None:
    import os

    from plait.cli.main import BROKEN_PIPE_EXIT

    read, write = os.pipe()
    os.close(read)  # the reader is gone before plait writes (`plait ... | head -1` once head has its line)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"} | (
        {"PYTHONUNBUFFERED": unbuffered} if unbuffered else {})
    try:
        out = subprocess.run([sys.executable, "-m", "plait", *argv], stdout=write, stderr=subprocess.PIPE, text=True,
                             env=env, timeout=120, check=False)
    finally:
        os.close(write)
    assert out.returncode == BROKEN_PIPE_EXIT == 1 and out.stderr == ""
