"""A job's training speed at a size and placement: plait's planner, memoised.

A job's tokens/s at ``gpus`` GPUs is the predicted throughput of the best plan plait's planner finds for its model on
the cluster as the job sees it (:func:`plait.search.runner.run_search` over :func:`plait.search.space.default_space`,
the search ``plait plan`` runs): a job spread over more nodes than it needs sees the tiers it crosses with their
spans shrunk (:meth:`plait.schedule.pool.Pool.spans`), and the planner replans it there, so a fragmented job is as
fast as plait can make it on that placement, and no faster. A size at which no plan fits is ``None``: the job
cannot run there.

Assumptions, each the same for every policy:
- the planner searches the layouts a scheduler's replanning would consider: every tp, pp, data-parallel sharding
  (ZeRO/FSDP, HSDP), micro-batch and recomputation of ``default_space``, without context parallelism, offload and
  pipeline schedules other than 1F1B (a tenth of the space, so a replan costs milliseconds to a few tenths of a
  second); every job trains at a global batch of :attr:`SpeedModel.global_batch` sequences of its model's length at every
  size (a resize keeps what the job computes; Pollux also tunes the batch, plait does not), in bf16;
- a job stopped by a policy checkpoints and, when it resumes on any GPUs, pays :meth:`Speed.restart_s`: writing and
  reading its state (``Estimate.state_bytes`` over its GPUs at the checkpoint store's per-GPU bandwidth, as
  :mod:`plait.predict.goodput` charges a restart) plus the relaunch time of ``reliability.toml``.

Searches are memoised by (model, GPUs, tier spans), so a trace of 10,000 jobs runs a few dozen searches; and the
searches of one model on one view of the cluster (its tier spans) share their per-layer quantities
(:class:`plait.cost.inner.Known`), which depend on a plan's inner knobs (tp, micro-batch, recomputation, ...) but not
on its GPU count (:mod:`plait.cost.inner`), so a size searched after another of its model costs only the
combinations new to it, with the same figures.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from plait.cost.crossover import StepSplit, step_split
from plait.cost.inner import Known
from plait.engine.engine import Engine
from plait.hardware.cluster import Cluster
from plait.plan.plan import Plan
from plait.predict.goodput import reliability
from plait.search.runner import run_search
from plait.search.space import SearchSpace, default_space
from plait.workload.catalog import get_model


@dataclass(frozen=True, kw_only=True)
class Speed:
    """The best plan of one job at one size and placement."""

    tokens_per_s: float
    """Predicted training throughput, tokens per second."""
    state_bytes: float
    """Weights and optimizer state the job checkpoints (``Estimate.state_bytes``)."""
    gpus: int
    """GPUs it runs on."""
    plan: Plan
    """The plan the planner chose."""
    storage_bytes_per_s_per_gpu: float
    """Checkpoint-store bandwidth per GPU (the cluster's, else ``reliability.toml``'s)."""
    relaunch_s: float
    """Seconds to reschedule and re-initialise a job (``reliability.toml``, assumed there)."""
    split: StepSplit | None = None
    """Its step's compute and exposed-synchronization phases and memory (:mod:`plait.cost.crossover`; ``None``:
    unknown, and the crossover policy never pairs the job)."""

    @property
    def restart_s(self) -> float:
        """Seconds a resumed job holds its GPUs before training again: write and read its checkpoint, relaunch."""
        return 2.0 * self.state_bytes / self.gpus / self.storage_bytes_per_s_per_gpu + self.relaunch_s


class SpeedModel:
    """Memoised planner answers for one cluster and one engine (the memo is this object's, never global: STYLE.md
    rule 3)."""

    global_batch = 512
    """Sequences per step of every job at every size (assumed: GPT-3's 0.5M-token batch at its 2,048-token
    sequences is 256; 512 lets sizes up to 512 GPUs run pure data parallelism)."""

    def __init__(self, cluster: Cluster, engine: Engine) -> None:
        self.cluster = cluster
        self.engine = engine
        """The engine every job's plans are ranked for."""
        self.searches = 0
        """Planner searches run so far."""
        self.search_s = 0.0
        """Wall seconds spent in them."""
        self.search_cpu_s = 0.0
        """CPU seconds of this process spent in them (a loaded machine's preemption does not count)."""
        self._memo: dict[tuple[str, int, tuple[int, ...]], Speed | None] = {}
        self._native_spans = tuple(t.span_gpus for t in cluster.tiers)
        self._views: dict[tuple[int, ...], Cluster] = {}
        """The cluster as a job sees it, by tier spans (one object per view: the cost model's memos key on it)."""
        self._known: dict[tuple[str, tuple[int, ...]], Known] = {}
        """Per (model, tier spans): the per-layer quantities its searches costed so far."""
        self._rule_reads: dict[int, frozenset[int]] = {}
        """The option lists each pruning rule read in the searches so far (:func:`plait.search.factored.pruned`)."""
        figures = reliability()
        self._storage = cluster.storage_bytes_per_s_per_gpu or figures.storage_bytes_per_s_per_gpu
        self._relaunch_s = figures.relaunch_s

    def _seen_as(self, spans: tuple[int, ...]) -> Cluster:
        """The cluster with its tiers' spans as one job sees them (built once per spans)."""
        view = self._views.get(spans)
        if view is None:
            view = self._views[spans] = self._view(spans)
        return view

    def _view(self, spans: tuple[int, ...]) -> Cluster:
        c = self.cluster
        if spans == tuple(t.span_gpus for t in c.tiers):
            return c
        tiers = tuple(replace(t, span_gpus=s) for t, s in zip(c.tiers, spans, strict=True))
        inner = min(c.scale_up_domain_gpus, spans[0])
        return replace(c, tiers=tiers, scale_up_domain_gpus=inner, gpus_per_node=min(c.gpus_per_node, inner))

    def at(self, model: str, gpus: int, spans: tuple[int, ...] | None = None) -> Speed | None:
        """The best plan of ``model`` on ``gpus`` GPUs whose tiers span ``spans`` (default: the cluster's own, a
        consolidated placement); ``None`` when no plan fits."""
        key = (model, gpus, spans or self._native_spans)
        if key not in self._memo:
            self._memo[key] = self._search(model, gpus, key[2])
        return self._memo[key]

    def _space(self, space: SearchSpace) -> SearchSpace:
        """The layouts a replan considers (module docstring), less the options whose every candidate a pruning rule
        refuses whatever the model and size, so that they are never enumerated: the same survivors in the same
        order, so the same plans are costed and ranked. Sequence parallelism off with tp > 1 is dominated
        (:mod:`plait.search.rules`, ``sequence-parallel-dominates``) and tp = 1 enumerates it off alone
        (:func:`plait.search.enumerate._tp_modes`); a ZeRO stage the engine refuses outright, and hybrid sharding
        (every ``hsdp_shard_sizes`` row) where it refuses that (:mod:`plait.engine.capability`)."""
        refused = self.engine.unsupported
        return replace(space, schedules=("1f1b",), offload=((False, False),), cp=(1,),
                       recompute=(("none", 1.0), ("selective", 1.0), ("full", 1.0)), sequence_parallel=(True,),
                       shardings=tuple(s for s in space.shardings if f"sharding={s}" not in refused),
                       hsdp_shard_sizes=() if "hsdp" in refused else space.hsdp_shard_sizes)

    def _search(self, model: str, gpus: int, spans: tuple[int, ...]) -> Speed | None:
        start, cpu = time.perf_counter(), time.process_time()
        spec, cluster = get_model(model), self._seen_as(spans)
        space = self._space(default_space(spec, cluster, gpus, (self.global_batch,), precisions=("bf16",)))
        known = self._known.get((model, spans))
        if known is None:  # every search ranks for one engine: its pruning rules' reads are shared by all
            known = self._known[model, spans] = Known(rule_reads=self._rule_reads)
        best = run_search(spec, cluster, space, engine=self.engine, workers=1, known=known).top(1)
        self.searches += 1
        self.search_s += time.perf_counter() - start
        self.search_cpu_s += time.process_time() - cpu
        if not best:
            return None
        est = best[0]
        return Speed(tokens_per_s=est.tokens_per_s, state_bytes=est.state_bytes, gpus=gpus, plan=est.plan,
                     storage_bytes_per_s_per_gpu=self._storage, relaunch_s=self._relaunch_s, split=step_split(est))
