"""The strategy space, declared as data: candidate lists per knob plus constraints.

Only distinct plans are enumerated: a knob that has no effect in a combination keeps
one value there (no virtual stages without the interleaved schedule, no schedule choice
with one stage, no sequence-parallel choice with ``tp = 1``, no shard-group choice
without sharding). Everything else is a candidate that ends feasible-with-estimate or
infeasible-with-reason (:mod:`plait.search.rules`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import get_args

from plait.engine.engine import Engine
from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.plan.columns import method_table
from plait.plan.plan import CpAttention
from plait.sync import ALLREDUCE, ParamServer, SyncMethod, parse
from plait.workload.model import ModelSpec

Offload = tuple[bool, bool]  # (optimizer, parameters)


@dataclass(frozen=True, kw_only=True)
class SearchSpace:
    """Knob values the planner combines for one GPU count."""

    gpus: int
    """GPUs every candidate occupies."""
    global_batches: tuple[int, ...]
    """Global batch sizes (sequences) allowed; one value fixes the batch."""
    seq_len: int
    """Tokens per sequence."""
    tp: tuple[int, ...]
    """Tensor-parallel degrees."""
    pp: tuple[int, ...]
    """Pipeline-parallel degrees."""
    cp: tuple[int, ...]
    """Context-parallel degrees."""
    ep: tuple[int, ...]
    """Expert-parallel degrees (1 for dense models)."""
    cp_attentions: tuple[str, ...]
    """How attention spans the cp ranks (``Plan.cp_attention``), tried where cp > 1."""
    micro_batches: tuple[int, ...]
    """Micro-batch sizes."""
    schedules: tuple[str, ...]
    """Pipeline schedules tried when pp > 1 (``interleaved`` combines with ``vpp``)."""
    vpp: tuple[int, ...]
    """Virtual stages per rank for the interleaved schedule."""
    shardings: tuple[str, ...]
    """ZeRO stages; sharded plans shard over all dp ranks, zero3 also over ``hsdp_shard_sizes``."""
    hsdp_shard_sizes: tuple[int, ...]
    """Shard-group sizes for HSDP (zero3 sharded within a group, replicated across groups)."""
    recompute: tuple[tuple[str, float], ...]
    """(mode, fraction of each stage's layers recomputed; 1.0 for all) pairs."""
    sequence_parallel: tuple[bool, ...]
    """Sequence-parallel settings tried when tp > 1."""
    offload: tuple[Offload, ...]
    """(optimizer, parameters) offload settings; parameter offload only with zero3."""
    precisions: tuple[str, ...]
    """Matmul precisions."""
    grad_reduce_dtypes: tuple[str, ...]
    """Gradient buffer/reduction dtypes (a numerical choice: fp32 unless the user allows bf16)."""
    memory_margin: float
    """Fraction of device memory kept free (a plan fits when total <= capacity x (1 - margin))."""
    allow_tp_across_nodes: bool
    """Permit tp (and ep x tp) beyond the scale-up domain."""
    dp_syncs: tuple[SyncMethod, ...] = (ALLREDUCE,)
    """Data-parallel synchronization methods (:mod:`plait.sync`; text is parsed) tried on layouts of dense models
    without context parallelism (what they are modelled for): on pure data-parallel layouts, and with
    :attr:`syncs_with_model_parallel` also on TP and PP ones."""
    syncs_with_model_parallel: bool = False
    """Whether TP and PP layouts try :attr:`dp_syncs` too. :func:`default_space` sets it where the GPUs span
    sites, where model-parallel replicas may meet a wide-area link; on one fabric the pure data-parallel layouts
    show where a method starts to win, and the search stays within its 1 s budget (17 methods would multiply
    every model-parallel layout's candidates 17 times)."""

    param_servers: bool = False
    """Whether pure data-parallel layouts also try parameter servers on every replica (``param_server:servers=dp``,
    balanced: the ring all-reduce's bytes in one exchange instead of ``2 (dp-1)`` steps, so it wins where the
    ring's per-step latency dominates), alone and with Poseidon's hybrid (fewer bytes where a replica's tokens
    per step are few against its linear layers' widths, for one GEMM per factored layer)."""

    swap_activations: bool = False
    """Whether candidates that do not fit with every activation on the device (``recompute='none'``) also try
    swapping activations to host memory (:func:`plait.search.parts.swap_twins`: only where memory binds)."""
    tp_grids: tuple[tuple[str, int], ...] = ()
    """2-D/2.5-D tensor-parallel grids tried beside 1-D where ``tp`` makes one, as ``(tp_mode, tp_depth)``
    (:mod:`plait.cost.tp2d`)."""

    methods: tuple[SyncMethod, ...] = field(init=False, repr=False, compare=False)
    """Every method the space tries, the all-reduce first: the table its plan columns' ``dp_sync`` codes index
    (:attr:`plait.plan.columns.PlanColumns.methods`), carried by the space into each search worker."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "dp_syncs", tuple(parse(s) if isinstance(s, str) else s for s in self.dp_syncs))
        object.__setattr__(self, "methods", method_table((*self.dp_syncs, *self.server_specs())))
        if self.gpus <= 0:
            raise ConfigError(f"gpus={self.gpus} must be > 0")
        if not self.global_batches or min(self.global_batches) <= 0:
            raise ConfigError(f"global batch {self.global_batches} must be one or more positive sizes")
        if not 0.0 <= self.memory_margin < 1.0:
            raise ConfigError(f"memory_margin={self.memory_margin} must be in [0, 1)")


    def server_specs(self) -> tuple[SyncMethod, ...]:
        """The parameter-server specs of :attr:`param_servers`, one per data-parallel degree of a layout."""
        if not self.param_servers:
            return ()
        dps = sorted({self.gpus // (t * p * c) for t in self.tp for p in self.pp for c in self.cp
                      if self.gpus % (t * p * c) == 0})
        return tuple(spec for dp in dps if dp > 1 for spec in server_specs(dp, whole_layers=True))


def for_engine(space: SearchSpace, engine: Engine) -> SearchSpace:
    """``space`` without the cp attention flavours and tensor-parallel grids ``engine`` refuses outright (its
    capability table's ``cp_attention=...`` and ``tp_grid`` entries): enumerated, every such candidate would only be
    refused, and at 405B on 16,384 GPUs the flavours would be 60% of the space."""
    kept = tuple(a for a in space.cp_attentions if f"cp_attention={a}" not in engine.unsupported) or ("ring",)
    grids = () if "tp_grid" in engine.unsupported else space.tp_grids
    if kept == space.cp_attentions and grids == space.tp_grids:
        return space
    return replace(space, cp_attentions=kept, tp_grids=grids)


def server_specs(dp: int, whole_layers: bool) -> tuple[SyncMethod, ...]:
    """The parameter-server specs :attr:`SearchSpace.param_servers` tries on a layout of ``dp`` replicas: a balanced
    server on each, and, where the replicas hold whole layers (tp = pp = 1), the same with hybrid communication."""
    plain = ParamServer(servers=dp)
    return (plain, ParamServer(servers=dp, hybrid=True)) if whole_layers else (plain,)


def _powers_of_two(limit: int) -> tuple[int, ...]:
    out, x = [], 1
    while x <= limit:
        out.append(x)
        x *= 2
    return tuple(out)


def _divisors(n: int, limit: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def default_space(model: ModelSpec, cluster: Cluster, gpus: int, global_batches: tuple[int, ...], *,
                  seq_len: int = 0, memory_margin: float = 0.05, allow_tp_across_nodes: bool = False,
                  precisions: tuple[str, ...] | None = None, grad_reduce_dtypes: tuple[str, ...] = ("fp32",),
                  max_micro_batch: int = 16, dp_syncs: tuple[SyncMethod | str, ...] = (ALLREDUCE,),
                  param_servers: bool = False) -> SearchSpace:
    """Every knob the estimator supports, with values sensible for ``model`` on ``cluster``."""
    seq = seq_len or model.seq_len
    tp_limit = gpus if allow_tp_across_nodes else min(gpus, cluster.scale_up_domain_gpus)
    tps = tuple(t for t in _powers_of_two(min(tp_limit, model.num_heads)) if gpus % t == 0)
    pps = tuple(p for p in _divisors(gpus, model.num_layers))
    cps = tuple(c for c in _powers_of_two(min(16, gpus)) if seq % (2 * c) == 0 or c == 1)
    eps = (1,) if not model.moe else tuple(e for e in _powers_of_two(min(model.moe.num_experts, gpus)))
    if precisions is None:
        half = cluster.accelerator.arithmetic("bf16")  # fp16 where the device has no bf16 (V100, T4)
        precisions = (half, "fp8") if "fp8" in cluster.accelerator.peak_tflops else (half,)
    return SearchSpace(
        gpus=gpus, global_batches=global_batches, seq_len=seq, tp=tps, pp=pps, cp=cps, ep=eps,
        cp_attentions=get_args(CpAttention),
        micro_batches=_powers_of_two(max_micro_batch), schedules=("1f1b", "interleaved", "zb-h1", "gpipe"),
        vpp=(2, 3, 4, 6, 8), shardings=("none", "zero1", "zero2", "zero3"),
        hsdp_shard_sizes=tuple(s for s in (cluster.scale_up_domain_gpus, 64, 512) if s < gpus),
        recompute=(("none", 1.0), ("selective", 1.0), ("full", 1.0), ("full", 0.5)),
        sequence_parallel=(True, False), offload=((False, False), (True, False), (True, True)),
        precisions=precisions, grad_reduce_dtypes=grad_reduce_dtypes, memory_margin=memory_margin,
        allow_tp_across_nodes=allow_tp_across_nodes, dp_syncs=dp_syncs,
        syncs_with_model_parallel=cluster.site_gpus is not None and gpus > cluster.site_gpus,
        param_servers=param_servers, swap_activations=True, tp_grids=TP_GRIDS,
    )


TP_GRIDS = (("2d", 1), ("2.5d", 2), ("2.5d", 4))
"""Grids the default space tries: a ``q x q`` grid, and 2 or 4 of them stacked (Tesseract's depths; with ``tp``
at most the scale-up domain's or the heads' 64, deeper stacks leave ``q = 1``)."""
