"""``plait run --model GNN.toml``: the GNN workers on this machine's CPU ranks (gloo), next to a single-process
reference and the cost model's bytes.

The graph the TOML describes is generated (a degree-corrected SBM with its nodes, edges and degree exponent:
:mod:`plait.run.graph`), cut into one part per rank, and trained with the TOML's model by sampled data parallelism
(:mod:`.worker`), partition-local training or LLCG (:mod:`.local_worker`), or GNNPipe's layer pipeline
(:mod:`.pipe_worker`); printed: the losses against one process training the same parts' batches, and the feature
bytes each rank sent against the expected bytes of the occupancy model on the generated graph's own degrees and cut.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from plait.errors import ConfigError, require_extra
from plait.run.launch import run_worker
from plait.run.preflight import check_cpu_machine
from plait.terminal import rich_console, titled_table
from plait.workloads import Workload
from plait.workloads.gnn.config import GnnConfig, GnnLocalConfig, GnnPipeConfig
from plait.workloads.gnn.cost import STRATEGIES, rank_fetch_bytes
from plait.workloads.gnn.loop import DEFAULT_LOOP
from plait.workloads.gnn.pipe import boundary_bytes, rank_pipe_bytes
from plait.workloads.gnn.sampler import Sampler, parse_sampler
from plait.workloads.gnn.sampling import measured_classes, sample_batch

WORKER, LOCAL_WORKER = "plait.workloads.gnn.worker", "plait.workloads.gnn.local_worker"
PIPE_WORKER = "plait.workloads.gnn.pipe_worker"


def run_gnn(workload: Workload, gpus: int, global_batch: int, steps: int, cache: float, dry_run: bool,
            strategy: str = "sampled_dp", sampler: str = "loop") -> None:
    """Check the options against the machine and train ``strategy`` on ``gpus`` CPU ranks beside one process
    (nothing is launched on ``dry_run``)."""
    cache, chosen = _checked_options(strategy, cache, sampler)
    spec = workload.description
    batch = _checked_job(spec, gpus, global_batch)
    config = gnn_worker_config(spec, batch, steps, cache)
    console = rich_console()
    g = spec.graph
    console.print(f"{spec.name}: generated graph of {g.nodes:,} nodes and {g.edges:,} edges in {gpus} parts, "
                  f"{batch} seeds per rank, {steps} steps, {strategy}"
                  + (f", {chosen.label()} sampler" if chosen.kind != "loop" else ""))
    if strategy == "host_features":
        console.print(f"plait: note: {HOST_FEATURES_NOTE}")
    if dry_run:
        return
    if strategy in LOCAL_WORKERS:
        _run_local(console, spec.name, gpus, GnnLocalConfig(**asdict(config), strategy=strategy))
        return
    if strategy == "full_graph":
        _run_pipe(console, spec, gpus, steps)
        return
    _run_sampled(console, spec, gpus, config, chosen)


def _checked_options(strategy: str, cache: float, sampler: str) -> tuple[float, Sampler]:
    """The checked options' cache fraction (1 where every rank holds every feature) and parsed sampler."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"--gnn-strategy {strategy}: must be one of {', '.join(STRATEGIES)}")
    if not 0.0 <= cache <= 1.0:
        raise ConfigError(f"--cache-fraction={cache} must lie in [0, 1]")
    chosen = parse_sampler(sampler)
    if chosen.kind == "dgl":
        raise ConfigError(f"--gnn-sampler {sampler}: DGL's GPU sampler is costed by plait estimate, not run by plait "
                          "run (its samplers: loop, matrix)")
    if chosen.kind != "loop" and strategy in LOCAL_WORKERS:
        raise ConfigError(f"--gnn-sampler {sampler}: {strategy} samples inside each part with the loop sampler")
    if strategy in ("replicated", "host_features"):  # every rank reads every feature where it is: a cache of all
        cache = 1.0
    if strategy == "full_graph" and chosen.kind != "loop":
        raise ConfigError(f"--gnn-sampler {sampler}: full_graph samples nothing")
    return cache, chosen


def _checked_job(spec: Any, gpus: int, global_batch: int) -> int:
    """Seeds per rank, once the job is one plait run's ranks can train and the machine can hold."""
    g, m = spec.graph, spec.model
    if g.directed:
        raise ConfigError(f"out_degree_exponent={g.out_degree_exponent}: plait run generates undirected graphs; "
                          "a directed graph is for estimates only")
    for option, on in (("dropout", m.dropout), ("batch_norm", m.batch_norm)):
        if on:
            raise ConfigError(f"[model].{option}=true: plait run's GNN layers have none; {option} is for "
                              "estimates only")
    stated = [f"{f.name}={getattr(spec.loop, f.name)!r}" for f in dataclasses.fields(spec.loop)
              if getattr(spec.loop, f.name) != getattr(DEFAULT_LOOP, f.name)]
    if stated:
        raise ConfigError(f"[loop] {', '.join(stated)}: plait run's ranks build, sample and hold their batches "
                          "themselves; a [loop] loader or copy is for estimates only, as are its graph formats and node "
                          "sharing")
    if gpus < 2 or global_batch % gpus:
        raise ConfigError(f"--gpus={gpus} must be >= 2 ranks and divide --global-batch={global_batch}")
    batch = global_batch // gpus
    if batch > g.nodes // gpus:
        raise ConfigError(f"{batch} seeds per rank exceed the {g.nodes // gpus} nodes of each part")
    require_extra("gnn", "plait run of a GNN")  # here, not in the ranks: their failure would say only that one failed
    check_cpu_machine(gpus, 8 * (g.nodes + 2 * g.edges) * 3 + 4 * g.nodes * g.features * 2)  # graph, ids, features
    return batch


def _run_sampled(console: Console, spec: Any, gpus: int, config: GnnConfig, chosen: Sampler) -> None:
    """Train a sampled strategy on gloo ranks and one process; print losses and bytes sent against the expected."""
    sampling = replace(config, sampler=chosen.kind, bulk=chosen.bulk,  # type: ignore[arg-type]
                       adjacency="partitioned" if chosen.partitioned else "replicated")
    measured = run_worker(WORKER, gpus, sampling)
    from plait.workloads.gnn.worker import train

    single = train(config, reference=gpus)
    expected = _expected_fetch_bytes(config, gpus, config.batch, config.cache, spec.model.fanouts,
                                     spec.graph.features)
    table = titled_table(f"{spec.name} on {gpus} gloo ranks")
    for col in ("step", "loss (ranks)", "loss (1 process)", "bytes sent per rank", "expected"):
        table.add_column(col, justify="right")
    for step, (loss, ref) in enumerate(zip(measured["losses"], single["losses"], strict=True)):
        sent = " / ".join(f"{r[step]:,}" for r in measured["bytes_sent"])
        table.add_row(str(step), f"{loss:.6f}", f"{ref:.6f}", sent, f"{expected:,.0f}")
    console.print(table)
    if chosen.partitioned:
        console.print("sampling over the partitioned adjacency sent " + " / ".join(
            f"{b:,}" for b in measured["sampling_bytes_sent"]) + " bytes per rank")


def graph_fields(spec: Any) -> dict[str, Any]:
    """The GNN workers' fields generating the graph a GNN job's statistics describe (:mod:`plait.run.graph`)."""
    g = spec.graph
    return {"nodes": g.nodes, "edges": g.edges, "features": g.features, "classes": g.classes,
            "exponent": g.degree_exponent}


def gnn_worker_config(spec: Any, batch: int, steps: int, cache: float) -> GnnConfig:
    """The run configuration of :mod:`.worker` (and :mod:`.local_worker`) training a GNN job's model;
    ``out`` is filled in where the ranks are launched."""
    m = spec.model
    return GnnConfig(**graph_fields(spec), kind=m.kind, heads=m.heads, hidden=m.hidden, fanouts=tuple(m.fanouts),
                     batch=batch, steps=steps, cache=cache, out=Path("unused"))


HOST_FEATURES_NOTE = ("host_features reads each batch's features from host memory over PCIe; on CPU ranks the "
                      "host's memory is the ranks' own, so the run gathers them from every rank's copy (as "
                      "replicated) and no link carries them")
"""What ``plait run`` says of a host_features plan on CPU ranks (offload's rule: the path runs, nothing moves)."""
LOCAL_WORKERS = ("partition_local", "llcg")


def _run_pipe(console: Console, spec: Any, gpus: int, steps: int) -> None:
    """Full-graph GraphSAGE through GNNPipe's layer pipeline (:mod:`.pipe_worker`), one layer per rank, beside
    one process; each rank's bytes per epoch beside :func:`plait.workloads.gnn.pipe.boundary_bytes`."""
    from plait.workloads.gnn.pipe_worker import train

    m = spec.model
    if m.kind != "sage" or m.layers != gpus:
        raise ConfigError(f"--gnn-strategy full_graph: plait run pipelines GraphSAGE one layer per rank; the model "
                          f"is {m.kind} with {m.layers} layers on --gpus={gpus}")
    chunks = 4 * gpus  # as the cost model's plait.workloads.gnn.pipe.CHUNKS_PER_STAGE
    config = GnnPipeConfig(**graph_fields(spec), hidden=m.hidden, layers=m.layers, chunks=chunks, steps=steps,
                           out=Path("unused"))
    measured = run_worker(PIPE_WORKER, gpus, config)
    single = train(config, reference=gpus)
    expected = rank_pipe_bytes(boundary_bytes(spec, [(r, r + 1) for r in range(gpus)]))
    table = titled_table(f"{spec.name}: full-graph GNNPipe on {gpus} gloo ranks, {chunks} chunks")
    for col in ("epoch", "loss (ranks)", "loss (1 process)", "bytes sent per rank", "expected"):
        table.add_column(col, justify="right")
    for epoch, (loss, ref) in enumerate(zip(measured["losses"], single["losses"], strict=True)):
        sent = " / ".join(f"{r[epoch]:,}" for r in measured["bytes_sent"])
        table.add_row(str(epoch), f"{loss:.6f}", f"{ref:.6f}", sent, " / ".join(f"{e:,.0f}" for e in expected))
    console.print(table)


def _run_local(console: Console, name: str, gpus: int, config: GnnLocalConfig) -> None:
    """partition_local or LLCG on the ranks, beside one process (:mod:`.local_worker`): no feature moves."""
    from plait.workloads.gnn.local_worker import train

    measured = run_worker(LOCAL_WORKER, gpus, config)
    single = train(config, reference=gpus)
    table = titled_table(f"{name} on {gpus} gloo ranks (no feature moves between ranks)")
    for col in ("step", "loss (ranks)", "loss (1 process)"):
        table.add_column(col, justify="right")
    for step, (loss, ref) in enumerate(zip(measured["losses"], single["losses"], strict=True)):
        table.add_row(str(step), f"{loss:.6f}", f"{ref:.6f}")
    console.print(table)


def _expected_fetch_bytes(args: GnnConfig, ranks: int, batch: int, cache: float, fanouts: tuple[int, ...],
                          features: int) -> float:
    """The occupancy model's expected bytes per rank on the generated graph's own degree histogram and cut."""
    import torch

    from plait.run.graph import generate

    graph = generate(args.nodes, args.edges, ranks, args.features, args.classes, exponent=args.exponent,
                     mix=args.mix, seed=args.seed)
    sampled = sample_batch(measured_classes(torch.bincount(graph.degrees()).numpy()), fanouts, batch, ranks,
                           graph.edge_cut(), cache)
    share = sampled.remote_misses / (ranks - 1)
    return rank_fetch_bytes([[0.0 if p == r else share for p in range(ranks)] for r in range(ranks)], 0, features)
