"""Ranks never outlive the command that started them.

torchrun starts each rank in a session of its own (torch.distributed.elastic's ``SubprocessHandler`` passes
``start_new_session=True``), so a signal to the launcher's process group does not reach the ranks, and a
``plait`` or torchrun that is killed leaves them training under PID 1. Two links close that:

- every rank asks the kernel for SIGKILL when its parent (torchrun) dies (Linux ``prctl(PR_SET_PDEATHSIG)``,
  man 2 prctl), and torchrun for SIGKILL when ``plait`` dies — also when ``plait`` itself is SIGKILLed;
- ``plait run`` turns SIGINT, SIGTERM and SIGHUP into the end of torchrun (SIGTERM, then SIGKILL after
  :data:`GRACE_S`), which takes its ranks with it, and exits with ``128 + signal``.
On systems without ``prctl`` (macOS, Windows) only the second link holds.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import NoReturn, TextIO

from plait.run.narration import Watch, signal_name, stopped_code

GRACE_S = 5.0
"""Seconds torchrun gets to stop its ranks after SIGTERM before it is killed."""
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class Stopped(Exception):
    """The launcher received ``signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> None:
    """Have the kernel send ``sig`` to this process when its parent exits; exit now if ``parent_pid`` (the
    parent this process was started by) is already gone. Nothing on systems without ``prctl``."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
        return
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(128 + sig)


def exit_without_teardown(status: int) -> NoReturn:
    """Flush and leave without interpreter finalization, for a rank whose work is done. gloo's worker threads can
    still be joinable (holding tensors of this process's collectives) while static destructors run, which aborts
    the process ("terminate called without an active exception", SIGABRT; pytorch/pytorch PR 179291 describes
    it) after a run that finished correctly; CI saw it in ``plait converge`` and in calibrate's sweep."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _child_setup(parent_pid: int) -> Callable[[], None]:
    return lambda: die_with_parent(parent_pid)


SHOWN = ("step ", "plait: error:", "plait: resumed", "dry run ok")
"""Lines of the ranks' and torchrun's standard error that reach the terminal; everything goes to the log."""
LOG_NAME = "plait-run.log"
"""The ranks' and torchrun's full output, in the run's folder: replaced by the next run there, removed when the run
succeeds."""


def supervise(command: list[str], env: dict[str, str], folder: Path, max_restarts: int = 0) -> int:
    """Run ``command`` (torchrun) tied to this process; returns the run's exit code (:mod:`plait.run.narration`), or
    ``128 + signal`` when this process was asked to stop (the child and its ranks are then gone). The ranks' and
    torchrun's standard error goes to :data:`LOG_NAME` in ``folder``; the terminal sees progress, the ``plait:``
    lines of the ranks (each once), each restart and why and, when the run fails, one line naming the failure and
    the log, which is then kept.

    torchrun's agent makes a folder per run and attempt for its ranks' error files under its log directory
    (``--log-dir``, or ``PET_LOG_DIR`` in its environment), by default a new ``torchelastic_*`` folder of the
    system's temporary directory that nothing removes (torch/distributed/elastic/multiprocessing/api.py,
    ``DefaultLogsSpecs``): every run would leave one. Unless ``env`` names a log directory, it is a temporary
    folder removed when the run ends (what a failed rank wrote there, torchrun also prints to the log)."""
    with tempfile.TemporaryDirectory(prefix="plait-torchrun-") as elastic_logs:
        return _supervised(command, {"PET_LOG_DIR": elastic_logs, **env}, folder, max_restarts)


def _supervised(command: list[str], env: dict[str, str], folder: Path, max_restarts: int) -> int:
    """:func:`supervise` with torchrun's log directory in ``env``."""
    log_path, log = _open_log(folder)
    child = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, errors="replace",
                             preexec_fn=_child_setup(os.getpid()))  # noqa: PLW1509

    def stop(signum: int, frame: FrameType | None) -> None:
        raise Stopped(signum)

    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, stop) for s in handled}
    watch = Watch(max_restarts=max_restarts)
    try:
        with log:
            shown: set[str] = set()  # every rank reports the same error: once is enough
            assert child.stderr is not None
            for line in child.stderr:
                log.write(line)
                note = watch.read(line)
                if line.startswith(SHOWN) and line not in shown:
                    sys.stderr.write(line)
                    if line.startswith("plait: error:"):
                        shown.add(line)
                if note is not None:
                    sys.stderr.write(note + "\n")
                    shown.clear()  # the next attempt's errors are news
        code, said = watch.ending(child.wait())
        if code == 0:
            log_path.unlink(missing_ok=True)  # another run in this folder may have ended first and removed it
        elif said is not None:
            sys.stderr.write(f"plait: error: {said}; the ranks' full output: {log_path}\n")
        else:
            sys.stderr.write(f"plait: the ranks' full output: {log_path}\n")
        return code
    except Stopped as stopped:
        _end(child)
        sys.stderr.write(f"plait: stopped by {signal_name(stopped.signum)}; torchrun and its ranks were ended; the "
                         f"ranks' full output: {log_path}\n")
        return stopped_code(stopped.signum)
    except BaseException:
        _end(child)
        raise
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _open_log(folder: Path) -> tuple[Path, TextIO]:
    """:data:`LOG_NAME` in ``folder``, opened for writing; a temporary file where that folder takes no file."""
    path = (folder / LOG_NAME).absolute()
    try:
        return path, path.open("w", encoding="utf-8")
    except OSError:
        fd, name = tempfile.mkstemp(prefix="plait-run-", suffix=".log")
        return Path(name), os.fdopen(fd, "w", encoding="utf-8")


def _end(child: subprocess.Popen[str]) -> None:
    """SIGTERM, then after :data:`GRACE_S` SIGKILL (the ranks follow torchrun through their death signal)."""
    if child.poll() is not None:
        return
    child.terminate()
    try:
        child.wait(GRACE_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def available_memory_bytes() -> int | None:
    """Memory the kernel can give new processes without swapping (``MemAvailable`` of /proc/meminfo, man 5
    proc), or ``None`` where there is no /proc."""
    try:
        for line in open("/proc/meminfo", encoding="ascii"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
