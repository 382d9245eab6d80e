"""``plait calibrate``: measure this machine into a cluster file for ``--cluster``."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer

from plait.errors import ConfigError, refuse_overwrite, require_extra
from plait.hardware.catalog import cluster_from_mapping
from plait.progress import LazyProgress


def calibrate_command(
    output: Annotated[Path, typer.Option(help="Cluster TOML to write.")] = Path("calibrated.toml"),
    ranks: Annotated[int, typer.Option(help="Local ranks for the collective measurements.")] = 2,
    threads: Annotated[int, typer.Option(help="CPU threads per rank (torchrun sets 1).")] = 1,
    force: Annotated[bool, typer.Option(help="Replace an existing file.")] = False,
    quick: Annotated[bool, typer.Option(help="One round per collective size over three sizes: rougher, faster.")] = False,
    backends: Annotated[bool, typer.Option(help="Only time the all-reduce by gloo and, with the mpi extra installed, by MPI (mpi4py under mpiexec) on the same sizes, and print both fitted alpha-beta figures side by side; writes nothing.")] = False,
) -> None:
    """Measure matmul, memory, attention and collective throughput into a hardware description."""
    import tomli_w

    from plait.run.calibrate import describe_machine

    require_extra("run", "plait calibrate")
    if ranks < 2:
        raise ConfigError(f"ranks={ranks} must be >= 2 to measure collectives")
    if backends:
        _compare_backends(ranks, 1 if quick else 5)
        return
    refuse_overwrite(output, force)
    # the whole measurement takes about a minute on a CPU: each stage is shown as it starts
    with tempfile.TemporaryDirectory() as tmp, LazyProgress("calibrate") as bar:
        table = describe_machine(ranks, Path(tmp), threads, lambda stage: bar.stage(f"measuring {stage}"), quick)
    cluster_from_mapping(table, str(output))  # what we write must load
    output.write_text(tomli_w.dumps(table), encoding="utf-8")
    typer.echo(f"wrote {output}: matmul peak {table['accelerator']['peak_tflops']} TFLOP/s, "
               f"copy {table['accelerator']['memory_bandwidth_gb_per_s']} GB/s, "
               f"collectives up to {table['tiers'][0]['bandwidth_gb_per_s_per_gpu']} GB/s bus bandwidth")


def _compare_backends(ranks: int, rounds: int) -> None:
    """``--backends``: gloo's and MPI's all-reduce on this machine, fitted and printed side by side."""
    import os

    from plait.run.calibrate_mpi import compare_backends, mpiexec, side_by_side

    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        fits = compare_backends(ranks, Path(tmp), rounds)
    typer.echo(f"all-reduce of float32 buffers between {ranks} local ranks (median of {rounds} rounds; load "
               f"{load:.1f} on {os.cpu_count()} cores): t = alpha + bytes / B, fitted on relative error")
    for line in side_by_side(fits):
        typer.echo(line)
    if mpiexec() is None:
        typer.echo("MPI not measured: pip install 'plait[mpi]' (the mpich and mpi4py wheels) for it")
