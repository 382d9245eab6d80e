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
from collections.abc import Callable
from types import FrameType

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


def _child_setup(parent_pid: int) -> Callable[[], None]:
    return lambda: die_with_parent(parent_pid)


def supervise(command: list[str], env: dict[str, str]) -> int:
    """Run ``command`` (torchrun) tied to this process; returns its exit code, or ``128 + signal`` when this
    process was asked to stop (the child and its ranks are then gone)."""
    child = subprocess.Popen(command, env=env, preexec_fn=_child_setup(os.getpid()))  # noqa: PLW1509

    def stop(signum: int, frame: FrameType | None) -> None:
        raise Stopped(signum)

    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, stop) for s in handled}
    try:
        return child.wait()
    except Stopped as stopped:
        _end(child)
        return 128 + stopped.signum
    except BaseException:
        _end(child)
        raise
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _end(child: subprocess.Popen[bytes]) -> None:
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
