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
) -> None:
    """Measure matmul, memory, attention and collective throughput into a hardware description."""
    import tomli_w

    from plait.run.calibrate import describe_machine

    refuse_overwrite(output, force)
    require_extra("run", "plait calibrate")
    if ranks < 2:
        raise ConfigError(f"ranks={ranks} must be >= 2 to measure collectives")
    # the whole measurement takes about a minute on a CPU: each stage is shown as it starts
    with tempfile.TemporaryDirectory() as tmp, LazyProgress("calibrate") as bar:
        table = describe_machine(ranks, Path(tmp), threads, lambda stage: bar.stage(f"measuring {stage}"), quick)
    cluster_from_mapping(table, str(output))  # what we write must load
    output.write_text(tomli_w.dumps(table), encoding="utf-8")
    typer.echo(f"wrote {output}: matmul peak {table['accelerator']['peak_tflops']} TFLOP/s, "
               f"copy {table['accelerator']['memory_bandwidth_gb_per_s']} GB/s, "
               f"collectives up to {table['tiers'][0]['bandwidth_gb_per_s_per_gpu']} GB/s bus bandwidth")
