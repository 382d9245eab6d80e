"""``plait converge``: measure a synchronization method's steps multiplier against the all-reduce."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from plait.errors import ConfigError
from plait.run.lifecycle import supervise
from plait.sync import SyncMethod

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
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Train the reference model on the shipped corpus under each method and under the all-reduce, from the same
    weights on the same batches, and report how many all-reduce steps reach each method's final loss."""
    from plait.plan.convergence import matching_multiplier
    from plait.run.converge import LEARNING_RATES
    from plait.sync import parse
    from plait.workload.catalog import resolve_model

    methods = [parse(s) for s in dp_sync]
    specs = [m.spec for m in methods]
    if optimizer not in LEARNING_RATES:
        raise ConfigError(f"optimizer={optimizer!r} must be one of {', '.join(LEARNING_RATES)}")
    if ranks < 2:
        raise ConfigError(f"ranks={ranks} must be >= 2 (a method needs replicas to synchronize)")
    if batch <= 0 or batch % ranks:
        raise ConfigError(f"batch={batch} must be a positive multiple of ranks={ranks}")
    if steps < 2:
        raise ConfigError(f"steps={steps} must be >= 2")
    window = window or max(1, steps // 10)
    if not 1 <= window <= steps:
        raise ConfigError(f"window={window} must be in [1, steps={steps}]")
    resolve_model(model)  # a bad model fails here, in one line, not in every rank
    waiting = [m.spec for m in methods if not m.server_ranks]  # the others: workers and server ranks
    cases = [f"{s}@{optimizer}" for s in dict.fromkeys(["allreduce", *waiting])]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "converge.json"
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
                   "-m", "plait.run.converge", "--out", str(out), "--model", model, "--steps", str(steps),
                   "--batch", str(batch), *cases]
        if not as_json:
            typer.echo(f"converge: {len(cases)} runs of {steps} steps on {ranks} ranks ...", err=True)
        code = supervise(command, env)  # a failure names its rank and log
        if code != 0:
            raise typer.Exit(code)
        curves = json.loads(out.read_text())
        for method in (m for m in methods if m.server_ranks):  # workers and server ranks: plait.run.async_train
            curves[f"{method.spec}@{optimizer}"] = _asynchronous_curve(method, model, steps, ranks, batch, optimizer,
                                                                       env, Path(tmp), as_json)
    reference = curves[f"allreduce@{optimizer}"]["losses"]
    rows = []
    for spec in specs:
        losses = curves[f"{spec}@{optimizer}"]["losses"]
        multiplier, match = matching_multiplier(losses, reference, window)
        rows.append({"dp_sync": spec, "steps": steps, "window": window, "initial_loss": sum(losses[:window]) / window,
                     "final_loss": sum(losses[-window:]) / window,
                     "allreduce_final_loss": sum(reference[-window:]) / window, "allreduce_steps_to_match": match,
                     "multiplier": multiplier, "bytes_per_step": sum(curves[f"{spec}@{optimizer}"]["bytes"]) / steps,
                     "allreduce_bytes_per_step": sum(curves[f"allreduce@{optimizer}"]["bytes"]) / steps})
    if as_json:
        from plait.cli.output import print_json

        print_json({"model": model, "ranks": ranks, "batch": batch, "optimizer": optimizer, "results": rows})
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Steps multipliers on {model}, {ranks} ranks, batch {batch}, {optimizer}, {steps} steps "
                        f"(losses: means of {window} steps)", title_justify="left")
    for col in ("dp_sync", "final loss", "all-reduce final", "all-reduce steps to match", "multiplier",
                "bytes/step vs all-reduce"):
        table.add_column(col, justify="left" if col == "dp_sync" else "right", overflow="fold")
    for r in rows:
        match = "not reached" if r["allreduce_steps_to_match"] is None else f"{r['allreduce_steps_to_match']:g}"
        ratio = r["bytes_per_step"] / r["allreduce_bytes_per_step"] if r["allreduce_bytes_per_step"] else 0.0
        table.add_row(r["dp_sync"], f"{r['final_loss']:.4f}", f"{r['allreduce_final_loss']:.4f}", match,
                      f"{r['multiplier']:.3f}", f"{ratio:.4f}")
    Console().print(table)


def _asynchronous_curve(method: SyncMethod, model: str, steps: int, ranks: int, batch: int, optimizer: str,
                        env: dict[str, str], folder: Path, quiet: bool) -> dict[str, list[float]]:
    """Loss per step (the mean of the workers' losses at each iteration) and bytes per step of an asynchronous
    method over ``ranks`` workers and its server ranks."""
    out = folder / "async.json"
    spec, world = method.spec, ranks + method.server_ranks
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}", "-m",
               "plait.run.async_train", "--out", str(out), "--model", model, "--spec", spec, "--steps", str(steps),
               "--batch", str(batch), "--optimizer", optimizer]
    if not quiet:
        typer.echo(f"converge: {spec} on {ranks} workers and {world - ranks} server ranks ...", err=True)
    code = supervise(command, env)
    if code != 0:
        raise typer.Exit(code)
    workers = json.loads(out.read_text())[spec]["workers"]
    losses = [sum(w["losses"][t] for w in workers) / len(workers) for t in range(steps)]
    return {"losses": losses, "bytes": workers[0]["bytes"]}
