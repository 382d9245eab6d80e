"""The plan search for a traced workload: data and pipeline parallelism over the traced units.

Every candidate of the space is estimated by :func:`plait.workloads.traced.cost.estimate_traced` (about a millisecond
each): pipeline stages ``pp`` (divisors of the GPUs up to the traced units), ZeRO stages, micro-batch sizes (powers
of two dividing the replica's batch), activation recomputation (none, full) and each synchronization method asked
for; and tensor parallelism where the repeated units hold Linear pairs or self-attentions: every ``tp`` dividing the
GPUs, the pairs' split dimensions and the attentions' head counts, the other GPUs pipeline stages and unsharded
replicas (``tp x pp x dp``; :mod:`plait.workloads.traced.tensor_parallel`; otherwise the search says why not).
Plans that do not fit in memory (with the margin) or that the rules refuse are counted by reason; the rest are
ranked by step time over the method's steps multiplier, as the transformer search ranks them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from plait.cost.estimate import Estimate
from plait.cost.input_pipeline import Loader
from plait.engine.engine import Engine
from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.plan.plan import Plan
from plait.predict.intervals import step_interval_s
from plait.sync import SyncMethod
from plait.workloads.traced.cost import TracedRunFacts, estimate_traced
from plait.workloads.traced.model import TracedWorkload
from plait.workloads.traced.tensor_parallel import tp_possible

SHARDINGS = ("none", "zero1", "zero2", "zero3")
RECOMPUTE = ("none", "full")


@dataclass
class TracedSearch:
    """Ranked plans and why the others fell."""

    ranked: list[Estimate] = field(default_factory=list)
    reasons: Counter[str] = field(default_factory=Counter)
    candidates: int = 0
    tp_note: str = ""
    """Whether tensor parallelism was searched, and why not where it was not."""


def candidate_plans(work: TracedWorkload, gpus: int, global_batch: int, dp_syncs: tuple[SyncMethod, ...],
                    precision: str = "bf16") -> list[Plan]:
    """Every plan of the traced space on ``gpus`` GPUs at ``global_batch`` examples per step."""
    blocks = max(1, len(work.units) - 2)
    plans = []
    for pp in (p for p in range(1, min(gpus, blocks) + 1) if gpus % p == 0):
        dp = gpus // pp
        if global_batch % dp:
            continue
        per_replica = global_batch // dp
        micro = [m for m in (2**i for i in range(per_replica.bit_length())) if per_replica % m == 0]
        for sharding in SHARDINGS if dp > 1 else ("none",):
            for mb in micro:
                for recompute in RECOMPUTE:
                    for sync in dp_syncs:
                        plans.append(Plan(pp=pp, dp_replicate=dp if sharding == "none" else 1,
                                          dp_shard=1 if sharding == "none" else dp, sharding=sharding,
                                          micro_batch=mb, global_batch=global_batch, recompute=recompute,
                                          precision=precision, dp_sync=sync, optimizer="adamw"))
    for tp in tp_possible(work, gpus):  # tp x pp x dp, unsharded replicas (dp = pp = 1: tp alone)
        for pp in (p for p in range(1, min(gpus // tp, blocks) + 1) if gpus // tp % p == 0):
            dp = gpus // tp // pp
            if global_batch % dp:
                continue
            per_replica = global_batch // dp
            micro = [m for m in (2**i for i in range(per_replica.bit_length())) if per_replica % m == 0]
            plans += [Plan(tp=tp, sp=False, pp=pp, dp_replicate=dp, micro_batch=mb, global_batch=global_batch,
                           recompute=recompute, precision=precision, optimizer="adamw")
                      for mb in micro for recompute in RECOMPUTE]
    return plans


def tp_note(work: TracedWorkload, gpus: int) -> str:
    """One line: the tensor-parallel degrees searched, or why none."""
    degrees = tp_possible(work, gpus)
    pairs = [p for p in work.pairs if not p.heads]
    attention = [p for p in work.pairs if p.heads]
    dims = sorted({d for p in work.pairs for d in p.split_dims()})
    held = (f"{len(pairs)} Linear pair(s)" if pairs else "") + (" and " if pairs and attention else "") + (
        f"{len(attention)} attention(s) split by heads" if attention else "")
    unsplit = f"; attention not split: {work.attention_note}" if work.attention_note and work.pairs else ""
    if degrees:
        return (f"tensor parallelism: tp={','.join(map(str, degrees))} searched over {held} (split dimensions "
                f"{dims}), pp x dp = {gpus} GPUs / tp pipeline stages and DDP replicas beside{unsplit}")
    if not work.pairs:
        return f"tensor parallelism not searched: {work.no_pairs_reason}"
    if gpus == 1:
        return f"tensor parallelism not searched: one GPU{unsplit}"
    return f"tensor parallelism not searched: no divisor of {gpus} GPUs above 1 divides the split dimensions {dims}"


def search_traced(work: TracedWorkload, cluster: Cluster, gpus: int, global_batch: int, dp_syncs: tuple[SyncMethod, ...],
                  engine: Engine, memory_margin: float = 0.05, precision: str = "bf16", loader: Loader | None = None,
                  channels_last: bool = False) -> TracedSearch:
    """Estimate every candidate, each fed by ``loader`` with its convolutions channels-last or not
    (:func:`plait.workloads.traced.cost.estimate_traced`); rank those that fit (module docstring)."""
    out = TracedSearch(tp_note=tp_note(work, gpus))
    facts = TracedRunFacts(loader=loader, channels_last=channels_last)
    for plan in candidate_plans(work, gpus, global_batch, dp_syncs, precision):
        out.candidates += 1
        try:
            est = estimate_traced(work, cluster, plan, engine, step_interval_s, facts)
        except ConfigError as refused:
            out.reasons[str(refused)] += 1
            continue
        if est.memory.total_bytes > est.memory.capacity_bytes * (1.0 - memory_margin):
            out.reasons["does not fit in GPU memory (with the safety margin)"] += 1
            continue
        out.ranked.append(est)
    out.ranked.sort(key=lambda e: e.step_time_s * e.steps_multiplier)
    return out
