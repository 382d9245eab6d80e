"""The planner's requests: best plans on N GPUs, or cheapest/fastest training across GPU counts."""

from __future__ import annotations

from dataclasses import replace

from plait.engine.engine import Engine
from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.search.explain import Relaxation
from plait.search.pareto import Point, price
from plait.search.runner import Progress, SearchResult, run_search
from plait.search.space import SearchSpace, default_space
from plait.workload.model import ModelSpec

OBJECTIVES = ("throughput", "cost", "time", "energy")
MAX_BATCHES = 32
"""Most global batches one search tries (``--global-batch`` as a list; a LOW:HIGH range holds at most 32 powers of
two): a bound on the work one command may ask for (each multiplies the space; 200 listed batches took 18 s)."""
MAX_GPU_COUNTS = 8
"""Most GPU counts one ``--gpus-range`` searches (powers of two, e.g. 64:8192): a bound on the work one command may
ask for, each count being a whole search (all 16 counts of ``--gpus-range 1:32768`` for Llama 3 8B on dgx-h100-ib
took 10 s on two shared cores)."""


def check_objective(objective: str, deadline_days: float | None = None, budget_usd: float | None = None) -> None:
    """Reject an unknown objective with the list of known ones, and a deadline or budget given to the throughput
    objective, which ranks by step time alone and would ignore them (STYLE.md rule 11: warn of no effect)."""
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective={objective!r} must be one of {', '.join(OBJECTIVES)}")
    given = [name for name, value in (("--deadline-days", deadline_days), ("--budget-usd", budget_usd))
             if value is not None]
    if objective == "throughput" and given:
        raise ConfigError(f"{' and '.join(given)} {'apply' if len(given) > 1 else 'applies'} to --objective cost, time or "
                          "energy (the throughput objective ranks by step time alone); add --objective cost|time|energy "
                          "or leave them out")


def relaxations(model: ModelSpec, cluster: Cluster, space: SearchSpace, engine: Engine) -> list[Relaxation]:
    """The nearest changes that would make a request with no feasible plan work."""
    tries: list[tuple[str, SearchSpace]] = []
    if not space.allow_tp_across_nodes:
        tp = tuple(t for t in (1, 2, 4, 8, 16, 32, 64) if space.gpus % t == 0 and model.num_heads % t == 0)
        tries.append(("allow tensor parallelism across nodes (--allow-tp-across-nodes)",
                      replace(space, allow_tp_across_nodes=True, tp=tp)))
    if space.memory_margin > 0:
        tries.append(("drop the memory safety margin (--memory-margin 0)", replace(space, memory_margin=0.0)))
    if 2 * space.gpus <= cluster.max_gpus:
        bigger = default_space(model, cluster, 2 * space.gpus, space.global_batches, seq_len=space.seq_len,
                               memory_margin=space.memory_margin, precisions=space.precisions)
        tries.append((f"double the GPUs to {2 * space.gpus}", bigger))
    half = tuple(sorted({max(1, b // 2) for b in space.global_batches}))
    if half != space.global_batches:
        tries.append((f"halve the global batch to {', '.join(map(str, half))}", replace(space, global_batches=half)))
    if space.seq_len >= 4096:
        tries.append((f"halve the sequence length to {space.seq_len // 2}", replace(space, seq_len=space.seq_len // 2)))
    out = []
    for change, relaxed in tries:
        result = run_search(model, cluster, relaxed, engine=engine)
        best = result.top(1)
        out.append(Relaxation(change, best[0] if best else None))
    return out


def search_gpu_counts(model: ModelSpec, cluster: Cluster, counts: list[int], global_batches: tuple[int, ...],
                      tokens: float, *, engine: Engine, seq_len: int = 0, memory_margin: float = 0.05,
                      allow_tp_across_nodes: bool = False, precisions: tuple[str, ...] | None = None,
                      progress: Progress | None = None, workers: int | None = None,
                      dp_syncs: tuple[str, ...] = ("allreduce",), rank_by: str = "p50") -> list[Point]:
    """The best plan at each GPU count, priced for ``tokens`` (``workers``: see :func:`run_search`; ``rank_by``
    ``energy``: each count's least-energy plan, else its fastest)."""
    points = []
    for gpus in counts:
        space = default_space(model, cluster, gpus, global_batches, seq_len=seq_len, memory_margin=memory_margin,
                              allow_tp_across_nodes=allow_tp_across_nodes, precisions=precisions, dp_syncs=dp_syncs)
        result: SearchResult = run_search(model, cluster, space, progress=progress, engine=engine, workers=workers,
                                          rank_by=rank_by)
        best = result.top(1)
        if best:
            points.append(price(best[0], tokens))
    return points


def parse_gpu_range(text: str) -> tuple[int, int]:
    """``LOW:HIGH`` of ``--gpus-range`` as two integers."""
    try:
        low, high = (int(x) for x in text.split(":"))
    except ValueError:
        raise ConfigError(f"gpus range {text!r} must be LOW:HIGH") from None
    return low, high


def parse_batches(text: str) -> tuple[int, ...]:
    """``--global-batch`` of ``plait plan``: '2048', '1024,2048' or '512:4096' (powers of two in the range)."""
    try:
        if ":" in text:
            low, high = (int(x) for x in text.split(":"))
            out, x = [], 1
            while x <= high:
                if x >= low:
                    out.append(x)
                x *= 2
            values = tuple(out)
        else:
            values = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ConfigError(f"global batch {text!r} must be N, N,M,... or LOW:HIGH") from None
    if not values or min(values) <= 0:
        raise ConfigError(f"global batch {text!r} must name positive sizes")
    values = tuple(dict.fromkeys(values))
    if len(values) > MAX_BATCHES:
        shown = text if len(text) <= 40 else f"{text[:40]}..."
        raise ConfigError(f"global batch {shown!r} names {len(values)} sizes; one search tries at most {MAX_BATCHES}")
    return values


def gpu_counts(low: int, high: int, cluster: Cluster) -> list[int]:
    """Powers of two from ``low`` to ``high`` (whole nodes above one node), within the cluster."""
    if low <= 0 or high < low:
        raise ConfigError(f"gpus range {low}:{high} must satisfy 0 < low <= high")
    if low > cluster.max_gpus:
        raise ConfigError(f"gpus range starts at {low} but cluster {cluster.name} has {cluster.max_gpus} GPUs")
    counts, x = [], 1
    while x <= min(high, cluster.max_gpus):
        if x >= low:
            counts.append(x)
        x *= 2
    if not counts:
        raise ConfigError(f"gpus range {low}:{high} holds no power of two; widen it (e.g. {low}:{2 * low})")
    if len(counts) > MAX_GPU_COUNTS:
        raise ConfigError(f"gpus range {low}:{high} spans {len(counts)} GPU counts ({counts[0]} to {counts[-1]}) on "
                          f"cluster {cluster.name}; one search compares at most {MAX_GPU_COUNTS} (e.g. {counts[0]}:"
                          f"{counts[MAX_GPU_COUNTS - 1]}, or {counts[-MAX_GPU_COUNTS]}:{counts[-1]})")
    return counts
