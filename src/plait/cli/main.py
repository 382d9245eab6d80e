"""The ``plait`` command: sub-commands are registered from their own modules.

User mistakes (:class:`ConfigError`) end as one line on stderr and exit code 2, never
a traceback (STYLE.md rule 11).
"""

from __future__ import annotations

import sys

import typer

from plait.errors import ConfigError

app = typer.Typer(
    name="plait",
    help="Plan, predict and run distributed deep-learning training.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    """Plan, predict and run distributed deep-learning training."""  # keeps subcommands when one is registered


COMMANDS: dict[str, tuple[str, str]] = {
    "estimate": ("estimate", "estimate_command"), "plan": ("plan", "plan_command"), "run": ("run", "run_command"),
    "simulate": ("simulate", "simulate_command"), "report": ("simulate", "report_command"),
    "calibrate": ("calibrate", "calibrate_command"), "validate": ("validate", "validate_command"),
    "models": ("catalogs", "models_command"), "clusters": ("catalogs", "clusters_command"),
    "engines": ("catalogs", "engines_command"),
}
"""Command name -> (module in plait.cli, function)."""


def _register(argv: list[str] | None = None) -> None:
    """Register the commands; when ``argv`` names one, only that one, so that a command imports only what it uses
    (``plait estimate`` never loads the planner, the simulator's plots or the runtime). ``plait --help`` and
    unknown names register all of them."""
    import importlib

    wanted = next((a for a in (argv or []) if not a.startswith("-")), None)
    names = [wanted] if wanted in COMMANDS else list(COMMANDS)
    for name in names:
        module, function = COMMANDS[name]
        app.command(name=name)(getattr(importlib.import_module(f"plait.cli.{module}"), function))


def main() -> None:
    """Console-script entry point."""
    _register(sys.argv[1:])
    try:
        app()
    except ConfigError as exc:
        print(f"plait: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("plait: interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
