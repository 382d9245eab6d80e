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
    classic: Annotated[Path | None, typer.Option(help="CSV of measured data-parallel throughputs of traced models "
                                                       "(tests/data/classic_dp.csv; sources: tests/data/classic_dp.md).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Predict every run with a measured step time (--runs), peak memory (--memory) or data-parallel throughput of
    a traced model (--classic); print errors and MAPE overall and per source."""
    if sum(x is not None for x in (runs, memory, classic)) != 1:
        raise ConfigError("pass one of --runs (measured step times), --memory (measured peak memory) or --classic "
                          "(measured throughputs of traced models)")
    if classic is not None:
        _classic(classic, as_json)
        return
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


def _classic(path: Path, as_json: bool) -> None:
    from rich.table import Table

    from plait.validate.classic import mape, validate_classic

    results = validate_classic(path)
    predicted = [r for r in results if r.error_pct is not None]
    by_source: dict[str, list[float]] = {}
    for r in predicted:
        by_source.setdefault(r.source, []).append(abs(r.error_pct or 0.0))
    summary = {"mape_pct": mape(results), "rows": len(predicted), "rows_in_file": len(results),
               "per_source": {k: {"mape_pct": sum(v) / len(v), "rows": len(v)} for k, v in by_source.items()},
               "error": "step time: predicted over measured, minus one (the throughputs' inverse ratio)",
               "results": [{"source": r.source, "run": r.label, "measured_per_s": r.measured_per_s,
                            "predicted_per_s": r.predicted_per_s, "error_pct": r.error_pct, "not_predicted": r.why_not}
                           for r in results]}
    if as_json:
        print_json(summary)
        return
    table = Table(title=f"classic data parallelism: step-time MAPE {summary['mape_pct']:.1f}% on {len(predicted)} of "
                        f"{len(results)} rows", title_justify="left")
    for column in ("source", "run", "measured/s", "predicted/s", "error"):
        table.add_column(column, justify="right" if column != "run" else "left")
    for r in predicted:
        table.add_row(r.source, r.label, f"{r.measured_per_s:,.0f}", f"{r.predicted_per_s:,.0f}", f"{r.error_pct:+.1f}%")
    console = Console()
    console.print(table)
    reasons: dict[str, int] = {}
    for r in results:
        if r.why_not:
            reasons[r.why_not] = reasons.get(r.why_not, 0) + 1
    for why, count in reasons.items():
        console.print(f"not predicted ({count}): {why}")
