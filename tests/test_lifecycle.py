"""Ranks never outlive ``plait run``: SIGTERM (the handler SIGINT and SIGHUP share) or SIGKILL (both
death-signal links: torchrun's to plait, the ranks' to torchrun) to the ``plait`` process, and no process of that
run is alive 10 s later. Each case starts a 2-rank gloo run of the tiny model
that would train for a long time, waits until both ranks are in their training loop, sends the signal, and looks
for the run's processes in /proc (they all carry the run's own plan path in their environment, which each inherits
from the ``plait`` process; the ranks' command line names their configuration file instead)."""

from __future__ import annotations

import getpass
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
if not Path("/proc/self/cmdline").exists():
    pytest.skip("needs /proc (Linux)", allow_module_level=True)

ROOT = Path(__file__).parents[1]
MODEL = ROOT / "examples" / "tiny-model.toml"


def _processes(marker: str) -> dict[int, str]:
    """pid -> command line of every live process whose command line or environment contains ``marker``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (entry / "environ").read_bytes().decode(errors="replace")
            state = next(line for line in (entry / "status").read_text().splitlines() if line.startswith("State:"))
        except (OSError, StopIteration):
            continue
        if (marker in cmdline or marker in environ) and "Z (zombie)" not in state:
            found[int(entry.name)] = cmdline
    return found


def _start(tmp_path: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    plan = tmp_path / "lifecycle-plan.toml"
    plan.write_text(f'[job]\nmodel = "{MODEL}"\n[plan]\nglobal_batch = 8\nmicro_batch = 2\ndp_replicate = 2\n')
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        launcher = subprocess.Popen([sys.executable, "-m", "plait", "run", "--plan", str(plan), "--steps", "100000",
                                     "--cluster", "dgx-h100-ib"], stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, env={**os.environ, "PLAIT_TEST_RUN": str(plan)},
                                    cwd=tmp_path)  # where the run's log goes
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # the reporting rank passed step 3: both ranks are in the loop (DDP syncs)
        if "step 3:" in log.read_text(errors="replace"):
            return launcher, str(plan), log
        if launcher.poll() is not None:
            break
        time.sleep(0.5)
    launcher.kill()
    raise AssertionError(f"the run did not start training:\n{log.read_text(errors='replace')[-3000:]}")


def _gone_within(marker: str, seconds: float) -> dict[int, str]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = _processes(marker)
        if not alive:
            return {}
        time.sleep(0.25)
    return _processes(marker)


# SIGINT and SIGHUP take the same handler as SIGTERM (plait.run.lifecycle.supervise), and a SIGKILLed plait
# exercises both death-signal links, torchrun's to plait and the ranks' to torchrun, so these two cover the rest.
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_no_rank_outlives_the_launcher(tmp_path: Path, sig: signal.Signals) -> None:
    launcher, marker, log = _start(tmp_path)
    try:
        ranks = [pid for pid, cmd in _processes(marker).items()
                 if "plait.run.worker" in cmd and "torch.distributed.run" not in cmd]
        assert len(ranks) == 2, _processes(marker)
        os.kill(launcher.pid, sig)
        left = _gone_within(marker, 10.0)
        assert not left, f"still alive 10 s after {sig.name} to plait: {left}"
        code = launcher.wait(10)
        assert code != 0
        if sig != signal.SIGKILL:
            assert code == 128 + sig, log.read_text(errors="replace")[-2000:]
            assert f"plait: stopped by {sig.name}" in log.read_text(errors="replace")
    finally:
        for pid in _processes(marker):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_the_launchers_death_is_named_not_a_rank_failure(tmp_path: Path, sig: signal.Signals) -> None:
    """The signal goes to torchrun, not to plait: plait says so and exits ``128 + signal``, and the ranks go too."""
    launcher, marker, log = _start(tmp_path)
    try:
        torchrun = [pid for pid, cmd in _processes(marker).items() if "torch.distributed.run" in cmd]
        assert len(torchrun) == 1, _processes(marker)
        os.kill(torchrun[0], sig)
        code = launcher.wait(30)
        said = log.read_text(errors="replace")
        assert code == 128 + sig, said[-2000:]
        assert f"the launcher (torchrun) was {'killed' if sig == signal.SIGKILL else 'stopped'} by {sig.name}, " \
               "not a rank" in said
        assert "a rank failed" not in said
        assert not _gone_within(marker, 10.0)
    finally:
        for pid in _processes(marker):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_run_leaves_nothing_in_the_temporary_directory(tmp_path: Path) -> None:
    """torchrun's agent makes a ``torchelastic_*`` folder per run in the system's temporary directory, which nothing
    removes; ``plait run`` gives it one of its own and removes it (plait.run.lifecycle.supervise), as it removes its
    other temporary files: a finished run leaves nothing in ``TMPDIR`` but the compiler's cache."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    plan = tmp_path / "plan.toml"
    plan.write_text(f'[job]\nmodel = "{MODEL}"\n[plan]\nglobal_batch = 8\nmicro_batch = 2\ndp_replicate = 2\n')
    done = subprocess.run([sys.executable, "-m", "plait", "run", "--plan", str(plan), "--steps", "2", "--cluster",
                           "dgx-h100-ib"], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ, "TMPDIR": str(scratch), "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "step 2:" in done.stderr
    # torch.compile's cache, one folder reused by every run of this user (torch/_inductor/runtime/cache_dir_utils.py)
    kept = {f"torchinductor_{getpass.getuser()}"}
    assert sorted(p.name for p in scratch.iterdir() if p.name not in kept) == []
