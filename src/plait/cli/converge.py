"""``plait converge``: measure a synchronization method's steps multiplier against the all-reduce."""

from __future__ import annotations

from typing import Annotated

import typer

from plait.cli.output import print_json
from plait.errors import require_extra
from plait.progress import LazyProgress
from plait.run.converge_runs import measure_multipliers
from plait.run.launch import RanksFailed
from plait.terminal import rich_console, titled_table

REFERENCE_MODEL = "examples/tiny-model.toml"


def converge_command(
    dp_sync: Annotated[list[str], typer.Option(help="A method METHOD[:key=value,...] to measure (repeatable).")],
    steps: Annotated[int, typer.Option(help="Optimizer steps of each run.")] = 200,
    model: Annotated[str, typer.Option(help="Model preset or file (the reference toy model of `plait run`).")]
    = REFERENCE_MODEL,
    ranks: Annotated[int, typer.Option(help="Data-parallel ranks (gloo on CPU).")] = 2,
    batch: Annotated[int, typer.Option(help="Global batch in sequences (a multiple of --ranks).")] = 8,
    optimizer: Annotated[str, typer.Option(help="sgd or adamw (the inner optimizer of local SGD and DiLoCo).")]
    = "adamw",
    window: Annotated[int, typer.Option(help="Steps averaged to compare losses (0: a tenth of --steps).")] = 0,
    cluster: Annotated[str, typer.Option(help="Cluster preset or file whose sites the ranks lie on (the "
                                               "all-reduce then hierarchical; default: one site).")] = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Train the reference model on the shipped corpus under each method and under the all-reduce, from the same
    weights on the same batches, and report how many all-reduce steps reach each method's final loss."""
    require_extra("run", "plait converge")
    try:
        with LazyProgress("converge", quiet=as_json) as bar:
            measured = measure_multipliers(dp_sync, steps, model, ranks, batch, optimizer, window, bar.stage,
                                            cluster)
    except RanksFailed as exc:
        raise typer.Exit(exc.code) from None
    rows, window = measured.rows, measured.window
    if as_json:
        print_json({"model": model, "ranks": ranks, "batch": batch, "optimizer": optimizer, "results": rows})
        return

    table = titled_table(f"Steps multipliers on {model}, {ranks} ranks, batch {batch}, {optimizer}, {steps} steps "
                         f"(losses: means of {window} steps)")
    for col in ("dp_sync", "final loss", "all-reduce final", "all-reduce steps to match", "multiplier",
                "bytes/step vs all-reduce"):
        table.add_column(col, justify="left" if col == "dp_sync" else "right", overflow="fold")
    for r in rows:
        match = "not reached" if r["allreduce_steps_to_match"] is None else f"{r['allreduce_steps_to_match']:g}"
        ratio = r["bytes_per_step"] / r["allreduce_bytes_per_step"] if r["allreduce_bytes_per_step"] else 0.0
        table.add_row(r["dp_sync"], f"{r['final_loss']:.4f}", f"{r['allreduce_final_loss']:.4f}", match,
                      f"{r['multiplier']:.3f}", f"{ratio:.4f}")
    rich_console().print(table)

