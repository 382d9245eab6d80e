"""The ``plait`` command: sub-commands are registered from their own modules.

User mistakes (:class:`ConfigError`) end as one line on stderr and exit code 2, never
a traceback (STYLE.md rule 11).
"""

from __future__ import annotations

import errno
import gc
import os
import sys

import typer

from plait.errors import ConfigError, missing_extra

app = typer.Typer(
    name="plait",
    help="Plan, predict and run distributed deep-learning training.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,  # help text is plain: `name[@version][[key=value]]` and `[job]` are not markup
)


@app.callback()
def _root() -> None:
    """Plan, predict and run distributed deep-learning training."""  # keeps subcommands when one is registered


COMMANDS: dict[str, tuple[str, str]] = {
    "estimate": ("estimate", "estimate_command"), "plan": ("plan", "plan_command"), "run": ("run", "run_command"),
    "simulate": ("simulate", "simulate_command"), "report": ("simulate", "report_command"),
    "calibrate": ("calibrate", "calibrate_command"), "validate": ("validate", "validate_command"),
    "models": ("catalogs", "models_command"), "clusters": ("catalogs", "clusters_command"),
    "engines": ("catalogs", "engines_command"), "converge": ("converge", "converge_command"),
    "schedule": ("schedule", "schedule_command"), "design": ("design", "design_command"),
}
"""Command name -> (module in plait.cli, function)."""


_REGISTERED: set[str] = set()
_BUILT: dict[frozenset[str], object] = {}
"""The click command typer builds from ``app`` (6 ms a time), per set of registered commands."""


def _register(argv: list[str] | None = None) -> None:
    """Register the commands; when ``argv`` names one, only that one, so that a command imports only what it uses
    (``plait estimate`` never loads the planner, the simulator's plots or the runtime). ``plait --help`` and
    unknown names register all of them. Registering twice is a no-op (:func:`run_cli` may run many times)."""
    import importlib

    wanted = next((a for a in (argv or []) if not a.startswith("-")), None)
    names = [wanted] if wanted in COMMANDS else list(COMMANDS)
    for name in names:
        if name in _REGISTERED:
            continue
        module, function = COMMANDS[name]
        app.command(name=name)(getattr(importlib.import_module(f"plait.cli.{module}"), function))
        _REGISTERED.add(name)


def _parser_error() -> type[Exception]:
    """The option parser's exception base: typer >= 0.2x vendors click and exports ``TyperException``; older typer
    raises click's own ``ClickException``."""
    if hasattr(typer, "TyperException"):
        return typer.TyperException
    import click

    return click.ClickException


def _error(message: str) -> int:
    print(f"plait: error: {' '.join(message.split())}", file=sys.stderr)
    return 2


def _shortened(text: str) -> str:
    """``text`` as its first 40 characters and its length, where it is longer."""
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text):,} characters)"


def run_cli(argv: list[str]) -> int:
    """Run one ``plait`` command line in this process and return its exit code.

    Every user mistake ends as one line ``plait: error: ...`` on stderr and exit code 2 — a
    :class:`ConfigError` from plait, a usage error from the option parser (unknown option, ``--gpus x``), or an
    optional dependency that is not installed (:class:`plait.errors.MissingExtra`, naming the extra) —
    never a traceback (STYLE.md rule 11). Anything else that escapes is a bug in plait and keeps its traceback.
    """
    nul = next((a for a in argv if "\x00" in a), None)
    if nul is not None:  # no process receives one from a shell (execve ends arguments at NUL); os.stat refuses it
        return _error(f"argument {nul!r} contains a NUL byte, which no file name or value may hold")
    _register(argv)
    key = frozenset(_REGISTERED)
    if key not in _BUILT:
        from typer.main import get_command

        _BUILT[key] = get_command(app)
    try:
        code = _BUILT[key].main(args=argv, prog_name="plait", standalone_mode=False)  # type: ignore[attr-defined]
    except ConfigError as exc:
        return _error(str(exc))
    except ModuleNotFoundError as exc:  # an optional extra the command needs and no earlier check named
        named = next((a for a in argv if a in COMMANDS), None)
        missing = missing_extra(exc, f"plait {named or ''}".strip())
        if missing is None:
            raise
        return _error(str(missing))
    except OSError as exc:
        if exc.errno != errno.ENAMETOOLONG:
            raise
        return _error(f"file name {_shortened(str(exc.filename))!r} is too long for this system (a name may hold "
                      f"{os.pathconf('/', 'PC_NAME_MAX')} bytes, a path {os.pathconf('/', 'PC_PATH_MAX')})")
    except KeyboardInterrupt:
        print("plait: interrupted", file=sys.stderr)
        return 130
    except _parser_error() as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `plait`: the help, as click prints it
            print(exc.format_message())
            return 0
        if type(exc).__name__ == "Abort":
            print("plait: interrupted", file=sys.stderr)
            return 130
        named = next((a for a in argv if a in COMMANDS), None)
        return _error(f"{exc.format_message()} (see `plait {named + ' ' if named else ''}--help`)")
    return code if isinstance(code, int) else 0


BROKEN_PIPE_EXIT = 1
"""Exit code when the reader of standard output closes it early (``plait estimate | head -1``): not 0, as the
output was cut short; 1, as Python's note on SIGPIPE does and as rich's console does when its own write fails
(https://docs.python.org/3/library/signal.html#note-on-sigpipe)."""


GC_THRESHOLDS = (100_000, 50, 50)
"""The cycle collector's thresholds for a ``plait`` process (CPython's default: 700, 10, 10). ``plait estimate --json``
ends holding some 30,000 tracked objects, made by its imports, plus 20,000 in dead cycles; at the default the
collector runs 68 times on the way, at these not once (counted with ``gc.callbacks``), and the process runs 16M fewer
instructions (``python benchmarks/estimate_process.py --json --instructions``). The first threshold is allocations
net of frees between young collections: dead cycles wait that much longer to be freed, as in mypy's own command line
(``gc.set_threshold(200 * 1000, 30, 30)`` in mypy/main.py)."""


def main() -> None:
    """Console-script entry point. A reader that closes the pipe early ends plait quietly with
    :data:`BROKEN_PIPE_EXIT`: standard output is pointed at ``/dev/null`` so that the flush at interpreter exit
    cannot fail again and print "Exception ignored" (Python's note on SIGPIPE).

    The process collects cycles at :data:`GC_THRESHOLDS`, and freezes what it holds before it exits: the interpreter's
    collections at exit then skip every module's objects (``gc.freeze``, 50M instructions of a ``plait estimate``,
    measured as above), whose memory the operating system takes back anyway; an object left in a reference cycle is
    not finalized, which Python never promises at exit
    (https://docs.python.org/3/reference/datamodel.html#object.__del__). Not where torch was imported: triton's
    nanobind bindings, which torch loads, print a leak report for every object they still hold at exit
    (https://nanobind.readthedocs.io/en/latest/refleaks.html)."""
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        code = run_cli(sys.argv[1:])
        sys.stdout.flush()  # inside the try: the last buffered output may be what meets the closed pipe
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(BROKEN_PIPE_EXIT)
    if "torch" not in sys.modules:  # torch's nanobind extensions (triton's) print leak warnings for frozen objects
        gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    main()
