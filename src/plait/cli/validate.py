"""``plait validate``: predicted vs measured step times of public training runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from plait.cli.options import JsonOption
from plait.cli.output import print_json
from plait.cli.render import print_memory_validation, print_validation
from plait.errors import ConfigError
from plait.progress import LazyProgress
from plait.terminal import rich_console, titled_table
from plait.validate.classic import mape
from plait.validate.datasets import DATASETS, dataset_path, option_path
from plait.validate.memory import validate_memory
from plait.validate.report import validate_rows
from plait.validate.runs import read_runs
from plait.workloads import kinds


def validate_command(
    dataset: Annotated[str | None, typer.Argument(help=f"A shipped dataset: {', '.join(DATASETS)} (the runs, the "
                                                       "single-node small-model runs, memory, classic, DiT, GNN and "
                                                       "DLRM files below; no option needed).",
                                                  show_default=False)] = None,
    runs: Annotated[Path | None, typer.Option(help="CSV of measured step times, or dev or small (the shipped public "
                                                   "runs; schema: plait/validate/data/README.md).")] = None,
    memory: Annotated[Path | None, typer.Option(help="CSV of measured peak memory per GPU, or memory (the shipped "
                                                     "memory_runs.csv; schema: plait/validate/data/README.md).")] = None,
    classic: Annotated[Path | None, typer.Option(help="CSV of measured data-parallel throughputs of traced models, or "
                                                      "classic (the shipped classic_dp.csv; sources: classic_dp.md "
                                                      "beside it).")] = None,
    dit: Annotated[Path | None, typer.Option(help="CSV of measured latencies of parallel diffusion-transformer "
                                                  "inference, or dit (the shipped dit_latency.csv; sources: "
                                                  "dit_latency.md beside it).")] = None,
    gnn: Annotated[Path | None, typer.Option(help="CSV of measured GNN training epoch times, or gnn (the shipped "
                                                  "gnn_epochs.csv; sources: gnn_epochs.md beside it).")] = None,
    dlrm: Annotated[Path | None, typer.Option(help="CSV of measured recommendation-model training throughputs, or "
                                                   "dlrm (the shipped dlrm_steps.csv; sources: dlrm_steps.md beside "
                                                   "it).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Predict every run with a measured step time (--runs), peak memory (--memory), data-parallel throughput of
    a traced model (--classic), DiT inference latency (--dit), GNN epoch time (--gnn) or recommendation-model
    throughput (--dlrm); print errors and MAPE overall and per source. `plait validate dev` (small, memory, classic,
    dit, gnn, dlrm) runs the shipped public runs."""
    paths = _csv_paths(dataset, {"runs": runs, "memory": memory, "classic": classic, "dit": dit, "gnn": gnn,
                                 "dlrm": dlrm})
    for kind in kinds():  # a workload kind's own measured runs
        check = kind.validation
        if check is not None and (path := paths[check.option]) is not None:
            with LazyProgress("predicting rows", quiet=as_json, unit="rows") as bar:
                results = check.read(path, bar)
            _report(results, check.title, as_json, check.error)
            return
    if paths["memory"] is not None:
        _validate_memory(paths["memory"], as_json)
        return
    runs = paths["runs"]
    assert runs is not None
    with LazyProgress("predicting rows", quiet=as_json, unit="rows") as bar:
        validation = validate_rows(read_runs(runs), bar)
    if as_json:
        print_json(validation.to_dict())
    else:
        print_validation(rich_console(), validation)


def _csv_paths(dataset: str | None, given: dict[str, Path | None]) -> dict[str, Path | None]:
    """Each CSV option's path (a shipped dataset's file under its option), once exactly one is given."""
    if dataset is not None:
        if any(x is not None for x in given.values()):
            raise ConfigError(f"dataset {dataset!r} and a CSV option: give one of them")
        path = dataset_path(dataset)
        given = {option: path if DATASETS[dataset][0] == option else None for option in given}
    paths = {option: option_path(option, value) for option, value in given.items()}
    if sum(x is not None for x in paths.values()) != 1:
        raise ConfigError("pass one of --runs (measured step times), --memory (measured peak memory), --classic "
                          "(measured throughputs of traced models), --dit (measured DiT inference latencies), --gnn "
                          "(measured GNN epoch times) or --dlrm (measured recommendation-model throughputs), or name "
                          "a shipped dataset: plait validate "
                          f"{'|'.join(DATASETS)}")
    return paths


def _validate_memory(memory: Path, as_json: bool) -> None:
    """Measured peak memory per GPU predicted, as JSON or a table."""
    with LazyProgress("predicting rows", quiet=as_json, unit="rows") as bar:
        result = validate_memory(memory, bar)
    if as_json:
        print_json(result.to_dict())
    else:
        print_memory_validation(rich_console(), result)


def _report(results, title: str, as_json: bool, error: str) -> None:  # type: ignore[no-untyped-def]
    """Predicted rows with their errors, MAPE overall and per source, and why the rest are not predicted."""
    predicted = [r for r in results if r.error_pct is not None]
    by_source: dict[str, list[float]] = {}
    for r in predicted:
        by_source.setdefault(r.source, []).append(abs(r.error_pct or 0.0))
    summary = {"mape_pct": mape(results), "rows": len(predicted), "rows_in_file": len(results),
               "per_source": {k: {"mape_pct": sum(v) / len(v), "rows": len(v)} for k, v in by_source.items()},
               "error": error,
               "results": [{"source": r.source, "run": r.label, "measured_per_s": r.measured_per_s,
                            "predicted_per_s": r.predicted_per_s, "error_pct": r.error_pct, "not_predicted": r.why_not}
                           for r in results]}
    if as_json:
        print_json(summary)
        return
    table = titled_table(f"{title} MAPE {summary['mape_pct']:.1f}% on {len(predicted)} of {len(results)} rows")
    for column in ("source", "run", "measured/s", "predicted/s", "error"):
        table.add_column(column, justify="right" if column != "run" else "left")
    for r in predicted:
        table.add_row(r.source, r.label, f"{r.measured_per_s:,.3g}", f"{r.predicted_per_s:,.3g}", f"{r.error_pct:+.1f}%")
    console = rich_console()
    console.print(table)
    reasons: dict[str, int] = {}
    for r in results:
        if r.why_not:
            reasons[r.why_not] = reasons.get(r.why_not, 0) + 1
    for why, count in reasons.items():
        console.print(f"not predicted ({count}): {why}")
