"""``plait validate``: predicted vs measured step times of public training runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from plait.cli.output import print_json
from plait.cli.render import print_validation
from plait.validate.report import validate_rows
from plait.validate.runs import read_runs


def validate_command(
    runs: Annotated[Path, typer.Option(help="CSV of measured runs (schema: tests/data/README.md).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Predict every run with a measured step time; print errors and MAPE overall and per source."""
    validation = validate_rows(read_runs(runs))
    if as_json:
        print_json(validation.to_dict())
    else:
        print_validation(Console(), validation)
