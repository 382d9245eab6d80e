"""``plait plan`` for a transformer: check the request, search the space for one GPU count (objective throughput)
or compare GPU counts (objectives cost and time). Plain functions the CLI and tests call; the export of the winner is
the caller's (search does not import export)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from plait.cost.estimate import Estimate
from plait.engine.choice import choose_engine
from plait.engine.engine import Engine
from plait.errors import ConfigError
from plait.hardware.catalog import resolve_cluster
from plait.hardware.cluster import Cluster
from plait.plan.convergence import searched_specs
from plait.plan.plan import LIMIT, Precision
from plait.search.adaptive import adaptive_specs
from plait.search.explain import Relaxation
from plait.search.pareto import Point, choose, pareto_front
from plait.search.per_stage import StageWin, improve, pipelines
from plait.search.planner import gpu_counts, parse_batches, parse_gpu_range, relaxations, search_gpu_counts
from plait.search.runner import RANK_BY, SearchResult, run_search
from plait.search.space import default_space
from plait.search.tp_grids import what_if
from plait.sync import ALLREDUCE, SyncMethod, parse
from plait.workload.catalog import resolve_model
from plait.workload.model import ModelSpec

MAX_SYNCS = 32
"""Most synchronization methods one search tries, allreduce included: the 25 with a steps multiplier in plait's
table (what a search tries by default) and a few more; a bound on the work one command may ask for."""
Progress = Callable[[str], Any]
"""A progress callback ``(done, total)`` for a search, made from its label (``None``: silent)."""
CheckExport = Callable[[Engine], None]
"""Refuses, before a search, an export to the request's folder for this engine (an existing file, a model the
engine's exporter cannot write)."""


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """What ``plait plan`` was asked for a transformer, as typed on the command line."""

    model: str
    """Catalog model, config.json or model TOML."""
    cluster: str
    """Cluster preset or TOML/YAML file."""
    engine: str | None
    """Engine to rank for and export to (``None``: :func:`plait.engine.choice.choose_engine`)."""
    gpus: int
    """GPUs (objective throughput)."""
    gpus_range: str | None
    """LOW:HIGH GPU counts to compare (objectives cost, time, energy)."""
    global_batch: str
    """Sequences per step: N, N,M,... or LOW:HIGH."""
    seq_len: int
    """Tokens per sequence (0: the model's)."""
    objective: str
    """throughput | cost | time | energy."""
    tokens: float
    """Tokens to train (objectives cost, time, energy)."""
    deadline_days: float | None
    """Limit on days to train."""
    budget_usd: float | None
    """Limit on dollars to train."""
    top: int
    """Plans to list."""
    memory_margin: float
    """Fraction of GPU memory kept free."""
    allow_tp_across_nodes: bool
    """Let tp and ep leave the scale-up domain."""
    precision: str | None
    """Matmul precisions to try, comma-separated (``None``: the space's default)."""
    dp_sync: tuple[str, ...] | None
    """Synchronization methods to try besides allreduce (``None``: every method with a steps multiplier)."""
    export: Path | None
    """Folder the winner is exported into (``None``: no export)."""
    workers: int | None
    """Processes that search pieces of the space."""
    rank_by: str
    """p50 or p90."""
    tp_grids: bool = False
    """Cost and rank 2-D/2.5-D tensor-parallel grids though the engine does not run them (a what-if)."""


@dataclass(frozen=True, kw_only=True)
class Checked:
    """A request after its checks: the resolved model, cluster and engine and the parsed lists."""

    request: PlanRequest
    """The request as asked."""
    model: ModelSpec
    """The resolved model."""
    cluster: Cluster
    """The resolved cluster."""
    engine: Engine
    """The engine ranked for and exported to."""
    batches: tuple[int, ...]
    """Global batches to try."""
    precisions: tuple[str, ...] | None
    """Matmul precisions to try (``None``: the space's default)."""
    syncs: tuple[SyncMethod, ...]
    """Synchronization methods to try, allreduce first."""

    @property
    def notes(self) -> tuple[str, ...]:
        """What the search assumed for every plan alike (the model's sequence length where ``--seq-len`` leaves it
        and the model does not state it), said once beside the plans rather than in each."""
        return self.model.seq_len_notes(self.request.seq_len)


@dataclass(frozen=True, kw_only=True)
class ThroughputPlans:
    """Objective throughput: the search of one GPU count."""

    checked: Checked
    """The request it answers."""
    result: SearchResult
    """The search."""
    best: list[Estimate]
    """The ``top`` best estimates (empty: nothing fits)."""
    fixes: list[Relaxation]
    """Where nothing fits: the relaxations tried and what they give."""
    per_stage: list[StageWin] = field(default_factory=list)
    """Per-stage plans (recomputation and layers per pipeline stage) that beat one of ``best``, fastest first
    (:func:`plait.search.per_stage.improve`)."""
    per_stage_cpu_s: float = 0.0
    """CPU seconds that per-stage search took."""


@dataclass(frozen=True, kw_only=True)
class CountPlans:
    """Objectives cost and time: the best plan at each GPU count, their Pareto front and the choice."""

    checked: Checked
    """The request it answers."""
    points: list[Point]
    """The best plan per GPU count, priced."""
    front: list[Point]
    """The Pareto front of days and dollars."""
    choice: Point
    """The point the objective and limits choose."""


def check_request(request: PlanRequest, check_export: CheckExport) -> Checked:
    """Every check that can refuse the request before a search, in the order ``plait plan`` reports them."""
    if request.rank_by not in RANK_BY:
        raise ConfigError(f"--rank-by={request.rank_by!r} must be one of {', '.join(RANK_BY)}")
    if request.rank_by != "p50" and request.objective != "throughput":
        raise ConfigError(f"--rank-by={request.rank_by} ranks the plans of objective throughput; objective "
                          f"{request.objective} compares GPU counts at their best predicted step")
    model_spec, cluster_spec = resolve_model(request.model), resolve_cluster(request.cluster)
    the_engine = choose_engine(request.engine, cluster_spec)
    batches = parse_batches(request.global_batch)
    if request.top < 1:
        raise ConfigError(f"--top={request.top} must be >= 1")
    for name, value, low in (("--gpus", request.gpus, 1), ("--seq-len", request.seq_len, 0),
                             *(("--global-batch", b, 1) for b in batches)):
        if not low <= value <= LIMIT:
            raise ConfigError(f"{name}={value} must be between {low} and {LIMIT}")
    if request.export is not None:  # before the search: an existing file or an unexportable model is refused at once
        check_export(the_engine)
    precision, dp_sync = request.precision, request.dp_sync
    precisions = tuple(p.strip() for p in precision.split(",")) if precision else None
    for name in precisions or ():
        if name not in get_args(Precision):
            raise ConfigError(f"--precision {precision!r}: {name!r} must be one of {', '.join(get_args(Precision))}")
    searched = (*searched_specs(), *adaptive_specs(cluster_spec))  # per-tier compression where sites are joined
    syncs = tuple(dict.fromkeys([ALLREDUCE, *((parse(s) for s in dp_sync) if dp_sync else searched)]))
    if len(syncs) > MAX_SYNCS:
        raise ConfigError(f"--dp-sync names {len(syncs) - 1} methods besides allreduce; one search tries at most "
                          f"{MAX_SYNCS - 1} (each multiplies the space)")
    return Checked(request=request, model=model_spec, cluster=cluster_spec, engine=the_engine, batches=batches,
                   precisions=precisions, syncs=syncs)


def plan_search(request: PlanRequest, progress: Progress, check_export: CheckExport) -> ThroughputPlans | CountPlans:
    """The request checked, then searched for its objective."""
    checked = check_request(request, check_export)
    if request.objective == "throughput":
        return search_throughput(checked, progress)
    return search_counts(checked, progress)


def search_throughput(checked: Checked, progress: Progress) -> ThroughputPlans:
    """Objective throughput: every candidate for ``--gpus``; where none fits, the relaxations that would."""
    request, model_spec, cluster_spec = checked.request, checked.model, checked.cluster
    if request.gpus_range:
        raise ConfigError("--gpus-range needs objective cost, time or energy; objective throughput takes --gpus")
    gpus = request.gpus
    space = default_space(model_spec, cluster_spec, gpus, checked.batches, seq_len=request.seq_len,
                          memory_margin=request.memory_margin, allow_tp_across_nodes=request.allow_tp_across_nodes,
                          precisions=checked.precisions, dp_syncs=checked.syncs, param_servers=not request.dp_sync)
    engine = what_if(checked.engine) if request.tp_grids else checked.engine
    with progress("searching plans") as bar:
        result = run_search(model_spec, cluster_spec, space, progress=bar, engine=engine,
                            workers=request.workers, rank_by=request.rank_by)
    if result.num_candidates == 0:
        raise ConfigError(f"gpus={gpus} has no tp*pp*cp factorisation within the model and cluster; "
                          f"nearest: gpus={max(8, 2 ** (gpus.bit_length()))}")
    best = result.top(request.top)
    fixes = relaxations(model_spec, cluster_spec, space, checked.engine) if not best else []
    started = time.process_time()
    wins = improve(model_spec, cluster_spec, checked.engine, pipelines(result, best), request.memory_margin)  # per stage, on the top
    return ThroughputPlans(checked=checked, result=result, best=best, fixes=fixes, per_stage=wins,
                           per_stage_cpu_s=time.process_time() - started)


def search_counts(checked: Checked, progress: Progress) -> CountPlans:
    """Objectives cost, time and energy: the best plan at each GPU count of ``--gpus-range`` (the least-energy one
    for energy), priced for ``--tokens``."""
    request = checked.request
    if request.gpus_range is None:
        raise ConfigError(f"objective {request.objective} needs --gpus-range LOW:HIGH (e.g. 64:1024)")
    counts = gpu_counts(*parse_gpu_range(request.gpus_range), checked.cluster)
    with progress("searching GPU counts") as bar:
        points = search_gpu_counts(checked.model, checked.cluster, counts, checked.batches, request.tokens,
                                   seq_len=request.seq_len, memory_margin=request.memory_margin,
                                   allow_tp_across_nodes=request.allow_tp_across_nodes,
                                   precisions=checked.precisions, progress=bar, engine=checked.engine,
                                   workers=request.workers, dp_syncs=checked.syncs,
                                   rank_by="energy" if request.objective == "energy" else "p50")
    choice = choose(points, request.objective, request.deadline_days, request.budget_usd)
    return CountPlans(checked=checked, points=points, front=pareto_front(points), choice=choice)

