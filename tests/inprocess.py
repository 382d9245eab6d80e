"""``plait ARGV`` run in the test's own process (the console script's code path, without a process start)."""

from __future__ import annotations

import contextlib
import io


def cli(argv: list[str]) -> tuple[int, str, str]:
    """Exit code, standard output and standard error of ``plait ARGV``."""
    from plait.cli.main import run_cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run_cli(argv)
    return code, out.getvalue(), err.getvalue()
