"""What ``plait run`` makes of its launcher's output: each restart and why, how a failed run ended, and the exit code
it ends with.

torchrun (``torch.distributed.run``) logs one line per failed attempt naming the first rank that failed,
``failed (exitcode: N) local_rank: R (pid: P) of binary: ...`` (a negative N: killed by signal -N;
torch/distributed/elastic/multiprocessing/api.py), then restarts every rank while ``--max-restarts`` allows, else
exits 1. A torchrun stopped by SIGTERM/SIGINT/SIGHUP logs ``SignalException: Process P got signal: S`` and exits 1;
one killed by SIGKILL leaves nothing. :class:`Watch` reads those lines as they come.

Exit codes of ``plait run`` (``plait run --help`` and docs/runtime.md list the same):
0 the run finished (or a dry run, or the multi-node line was printed); 1 a rank failed (crashed or was killed);
2 bad input, refused in one line before a rank starts or by the ranks; 3 a step's gradient norm was not finite
under ``--on-nonfinite stop``; 128 + N a signal N stopped ``plait`` or its launcher (130 Ctrl-C, 137 SIGKILL,
143 SIGTERM).
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field

EXIT_FAILED = 1
"""A rank failed: crashed, or killed (torchrun's own exit code for a failed worker group)."""
EXIT_INPUT = 2
"""Bad input: a ``ConfigError``, refused in one line (by ``plait`` before a rank starts, or by the ranks)."""
EXIT_NONFINITE = 3
"""A step's global gradient norm was not finite and ``--on-nonfinite stop`` stopped the run."""
RANK_CODES = (EXIT_INPUT, EXIT_NONFINITE)
"""The ranks' own documented exit codes, passed on by ``plait`` where torchrun reports only that a rank failed."""


def stopped_code(signum: int) -> int:
    """The exit code of a process stopped by signal ``signum`` (the shell's convention)."""
    return 128 + signum


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15; ``signal 99`` for a number this system does not name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def how_it_ended(exit_code: int) -> str:
    """A process's end as torchrun reports it: a negative exit code is the signal that killed it."""
    return f"killed by {signal_name(-exit_code)}" if exit_code < 0 else f"exit code {exit_code}"


_FAILED = re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<rank>\d+)")
_LAUNCHER_SIGNAL = re.compile(r"SignalException: Process \d+ got signal: (?P<signum>\d+)")
_RANK_PREFIX = re.compile(r"^\[rank(?P<rank>\d+)\]:")


def _exception(line: str) -> str | None:
    """The exception a traceback's last line names (``ValueError: ...``), without torch's ``[rankN]:`` prefix."""
    text = line.split("]: ", 1)[-1].strip() if _RANK_PREFIX.match(line) else line.strip()
    name = text.split(":", 1)[0]
    ok = name.endswith(("Error", "Exception")) and " " not in name and not name.startswith("torch.distributed")
    return text[:300] if ok else None


@dataclass(frozen=True)
class Failure:
    """One failed attempt as torchrun reported it."""

    rank: int
    """The first rank that failed."""
    exit_code: int
    """Its exit code (negative: the signal that killed it)."""
    cause: str
    """One line: the rank, how it ended, and its last exception where it left one."""
    said: bool
    """Whether a rank's ``plait: error:`` line of this attempt already reached the terminal."""


@dataclass
class Watch:
    """The launcher's standard error read line by line: the attempts' failures, the ranks' last exceptions, and
    whether the launcher itself was stopped by a signal."""

    max_restarts: int = 0
    """Restarts torchrun's elastic agent may make (``--max-restarts``)."""
    failures: list[Failure] = field(default_factory=list)
    """One per failed attempt, oldest first."""
    launcher_signal: int | None = None
    """The signal that stopped torchrun, where torchrun logged one."""
    _said: bool = False
    """Whether a rank's ``plait: error:`` line of this attempt reached the terminal."""
    _exceptions: dict[int | None, str] = field(default_factory=dict)
    """The newest exception line of each rank in this attempt (``None``: a line without a rank prefix)."""

    def read(self, line: str) -> str | None:
        """Take one line; return what to say now (a restart and its cause), else ``None``."""
        if line.startswith("plait: error:"):
            self._said = True
        if (exception := _exception(line)) is not None:
            prefix = _RANK_PREFIX.match(line)
            self._exceptions[int(prefix.group("rank")) if prefix else None] = exception
        if (stopped := _LAUNCHER_SIGNAL.search(line)) is not None:
            self.launcher_signal = int(stopped.group("signum"))
            return None
        failed = _FAILED.search(line)
        if failed is None:
            return None
        rank, code = int(failed.group("rank")), int(failed.group("code"))
        own = self._exceptions.get(rank)
        cause = f"rank {rank} failed ({how_it_ended(code)})" + (f": {own}" if own else "")
        self.failures.append(Failure(rank, code, cause, self._said))
        self._exceptions.clear()
        self._said = False
        attempt = len(self.failures)
        if attempt > self.max_restarts:
            return None  # the last attempt: the run's ending says it
        return (f"plait: {cause}; restart {attempt} of {self.max_restarts}: every rank starts again from the newest "
                "checkpoint")

    def ending(self, launcher_code: int) -> tuple[int, str | None]:
        """The exit code for torchrun's ``launcher_code`` and what to say of it (``None``: nothing beyond what the
        ranks said)."""
        if launcher_code == 0:
            return 0, None
        if launcher_code < 0:  # torchrun itself was killed; its ranks followed through their death signal
            return (stopped_code(-launcher_code), f"the launcher (torchrun) was {how_it_ended(launcher_code)}, "
                    "not a rank; its ranks ended with it")
        if self.launcher_signal is not None:
            return (stopped_code(self.launcher_signal), "the launcher (torchrun) was stopped by "
                    f"{signal_name(self.launcher_signal)}, not a rank; it stopped its ranks")
        if self.failures:
            last = self.failures[-1]
            exit_code = last.exit_code if last.exit_code in RANK_CODES else launcher_code
            if last.said:
                return exit_code, None
            if ":" in last.cause:
                return exit_code, last.cause
            return exit_code, f"{last.cause} without an exception; the other ranks then lost their peer"
        if self._said:
            return launcher_code, None
        exception = self._exceptions.get(None) or next(iter(self._exceptions.values()), None)
        return launcher_code, f"a rank failed: {exception}" if exception else "a rank failed"
