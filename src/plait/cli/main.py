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


def _register() -> None:
    from plait.cli import calibrate, catalogs, estimate, plan, run, simulate, validate

    app.command(name="estimate")(estimate.estimate_command)
    app.command(name="plan")(plan.plan_command)
    app.command(name="run")(run.run_command)
    app.command(name="simulate")(simulate.simulate_command)
    app.command(name="report")(simulate.report_command)
    app.command(name="calibrate")(calibrate.calibrate_command)
    app.command(name="validate")(validate.validate_command)
    app.command(name="models")(catalogs.models_command)
    app.command(name="clusters")(catalogs.clusters_command)
    app.command(name="engines")(catalogs.engines_command)


def main() -> None:
    """Console-script entry point."""
    _register()
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
