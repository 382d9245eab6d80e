"""``plait plan``: search the strategy space, rank and explain plans, export the winner."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from plait.cli.cluster_choice import mixed_or_none
from plait.cli.mixed import mixed_plan
from plait.cli.numbers import MAX_WORKERS, count, quantity
from plait.cli.options import (
    DEFAULT_CLUSTER,
    DEFAULT_GPUS,
    DEFAULT_MODEL,
    ENGINE_WORDS,
    ChannelsLastOption,
    ClusterOption,
    ForceOption,
    GpusRangeOption,
    InputDtypeOption,
    InputShapeOption,
    JsonOption,
    LoaderOption,
    ModelOption,
    SeqLenOption,
    TokensOption,
)
from plait.engine.catalog import DEFAULT_ENGINE
from plait.engine.choice import SITES_ENGINE
from plait.errors import ConfigError
from plait.search.planner import check_objective
from plait.search.planner import parse_batches as _batches
from plait.workloads import entry, load, refuse_engine, refuse_foreign_options


def plan_command(
    model: ModelOption = None,
    cluster: ClusterOption = None,
    engine: Annotated[str | None, typer.Option("--engine", help=f"{ENGINE_WORDS} [default: {DEFAULT_ENGINE}, or "
                                                                f"{SITES_ENGINE} on a cluster that spans sites]")] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", help=f"GPUs; dp = gpus / (tp*pp*cp). [default: {DEFAULT_GPUS}; "
                                                            "on a mixed cluster, all its devices (fewer: each group "
                                                            "its share)]")] = None,
    gpus_range: GpusRangeOption = None,
    global_batch: Annotated[str, typer.Option(help="Sequences per step: N, N,M,... or LOW:HIGH.")] = "128",
    seq_len: SeqLenOption = 0,
    objective: Annotated[str, typer.Option(help="throughput | cost | time | energy (the least data-centre energy to train --tokens; with --gpus-range).")] = "throughput",
    tokens: TokensOption = 1e12,
    deadline_days: Annotated[float | None, quantity("Limit on days to train.")] = None,
    budget_usd: Annotated[float | None, quantity("Limit on dollars to train.")] = None,
    top: Annotated[int, count("Plans to list.")] = 5,
    memory_margin: Annotated[float, typer.Option(help="Fraction of GPU memory kept free.")] = 0.05,
    allow_tp_across_nodes: Annotated[bool, typer.Option(help="Let tp and ep leave the scale-up domain.")] = False,
    tp_grids: Annotated[bool, typer.Option(help="Cost and rank 2-D/2.5-D tensor-parallel grids (SUMMA, Tesseract) too, "
                                                "though no engine runs them yet: a what-if.")] = False,
    precision: Annotated[str | None, typer.Option(help="Matmul precisions to try, e.g. bf16 or bf16,fp8.")] = None,
    dp_sync: Annotated[list[str] | None, typer.Option(help="A data-parallel synchronization method to try besides "
                                                           "allreduce, METHOD[:key=value,...]; repeat for more. "
                                                           "[default: every method with a steps multiplier in "
                                                           "plait's table; `--dp-sync allreduce` for none]")] = None,
    export: Annotated[Path | None, typer.Option(help="Write the winner as plan.toml and the engine's own configuration "
                                                     "(torchtitan, Megatron-LM or DeepSpeed) into this folder.")] = None,
    force: ForceOption = False,
    workers: Annotated[int | None, count("Processes that search pieces of the space (default: every core for spaces "
                                         "of 4,000,000 candidates or more).", high=MAX_WORKERS)] = None,
    rank_by: Annotated[str, typer.Option(help="p50: rank by the predicted step time; p90: by its 90% bound (the plan "
                                              "that is fast even if the prediction is wrong).")] = "p50",
    as_json: JsonOption = False,
    input_shape: InputShapeOption = None,
    input_dtype: InputDtypeOption = None,
    loader: LoaderOption = None,
    channels_last: ChannelsLastOption = False,
) -> None:
    """Search every parallel layout and memory knob; rank plans and explain the winner.

    --model MODULE:FACTORY traces any PyTorch module and searches data and pipeline parallelism, ZeRO stages,
    micro-batches, recomputation and the --dp-sync methods (global batch in examples)."""
    model, cluster = model or DEFAULT_MODEL, cluster or DEFAULT_CLUSTER
    mixed_gpus, gpus = gpus, DEFAULT_GPUS if gpus is None else gpus
    options = dict(locals())
    del options["mixed_gpus"]
    check_objective(objective, deadline_days, budget_usd)
    workload = load(model)
    refuse_foreign_options(workload.kind, options)
    mixed = mixed_or_none(cluster)
    if mixed is not None:
        if objective != "throughput" or gpus_range or "," in global_batch or ":" in global_batch:
            raise ConfigError("a mixed cluster is planned for throughput at one global batch (no --objective "
                              "cost/time, --gpus-range, or several batches)")
        mixed_plan(model, cluster, mixed, _batches(global_batch)[0], engine, top, memory_margin, as_json,
                   mixed_gpus, export, force)
        return
    refuse_engine(workload.kind, engine)
    entry(workload, "plan")(workload, options)
