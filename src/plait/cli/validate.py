"""``plait validate``: predicted vs measured step times of public training runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from plait.cli.output import print_json
from plait.cli.render import print_memory_validation, print_validation
from plait.errors import ConfigError
from plait.validate.report import validate_rows
from plait.validate.runs import read_runs


def validate_command(
    runs: Annotated[Path | None, typer.Option(help="CSV of measured step times (schema: tests/data/README.md).")] = None,
    memory: Annotated[Path | None, typer.Option(help="CSV of measured peak memory per GPU "
                                                     "(tests/data/memory_runs.csv; schema: tests/data/README.md).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Predict every run with a measured step time (--runs) or peak memory (--memory); print errors and MAPE
    overall and per source."""
    if (runs is None) == (memory is None):
        raise ConfigError("pass one of --runs (measured step times) or --memory (measured peak memory)")
    if memory is not None:
        from plait.validate.memory import validate_memory

        result = validate_memory(memory)
        if as_json:
            print_json(result.to_dict())
        else:
            print_memory_validation(Console(), result)
        return
    assert runs is not None
    validation = validate_rows(read_runs(runs))
    if as_json:
        print_json(validation.to_dict())
    else:
        print_validation(Console(), validation)
