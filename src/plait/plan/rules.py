"""Validation of plans against their model and cluster, as named vectorised rules.

Each rule is data: a name, a mask over :class:`PlanColumns` marking the rows that break
it, and a message naming the value and the rule for one plan (``tp=3 must divide
num_heads=32``). The estimator raises the first broken rule as a :class:`ConfigError`;
the planner records it as the candidate's infeasibility reason (STYLE.md rules 9, 11).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.plan import tp2d_rules as grid
from plait.plan.columns import PlanColumns
from plait.plan.per_stage import check_stages
from plait.plan.plan import Plan
from plait.sync import MODELLED
from plait.workload.model import ModelSpec

if TYPE_CHECKING:
    import numpy as np

Mask = Callable[[PlanColumns, ModelSpec, Cluster], "np.ndarray"]
Message = Callable[[Plan, ModelSpec, Cluster], str]


@dataclass(frozen=True)
class Rule:
    """One named validity rule."""

    name: str
    broken: Mask
    message: Message
    method_only: bool = False
    """Whether only a row with a synchronization method other than the all-reduce (``dp_sync`` code 0) can break it:
    a single plan that all-reduces skips it (``tests/test_batch_equality.py`` checks each such rule holds on
    all-reduce rows)."""


def _seq(c: PlanColumns, m: ModelSpec) -> np.ndarray:
    return c.xp.where(c["seq_len"] > 0, c["seq_len"], m.seq_len)


def _stage_layers(c: PlanColumns, m: ModelSpec) -> np.ndarray:
    return -(-m.num_layers // c.xp.maximum(c["pp"], 1))


_POSITIVE = ("tp", "pp", "vpp", "cp", "ep", "dp_replicate", "dp_shard", "micro_batch", "global_batch")


def _first_nonpositive(p: Plan) -> str:
    name = next(n for n in _POSITIVE if getattr(p, n) <= 0)
    return f"{name}={getattr(p, name)} must be > 0"


def require_positive(p: Plan) -> None:
    """Refuse ``p`` where a degree or batch is not positive (the rule the checks below apply to every plan), for a
    layout that enters without them (a mixed plan's shared layout, :func:`plait.predict.mixed.mixed_layout`)."""
    if any(getattr(p, n) <= 0 for n in _POSITIVE):
        raise ConfigError(_first_nonpositive(p))


def _sync_unmodelled(c: PlanColumns) -> Any:
    """Rows whose ``dp_sync`` method has no cost model yet (:data:`plait.sync.MODELLED`)."""
    return c.sync_rows(lambda s: s.name not in MODELLED)


def _sync_method(p: Plan) -> str:
    return p.dp_sync.name


def _hybrid_servers(c: PlanColumns) -> Any:
    """Rows of parameter servers with Poseidon's hybrid communication."""
    return c.sync_rows(lambda s: s.sufficient_factors)


def _sync_split_message(p: Plan) -> str:
    """Why a dp_sync method is refused beside expert parallelism, or beside sharded context parallelism."""
    if p.ep > 1:
        return (f"dp_sync={_sync_method(p)!r} synchronizes data-parallel replicas only, but ep={p.ep} ranks each hold "
                "different experts and reduce their gradients with the all-reduce (plait's runtime cannot run a "
                "method over them yet): needs ep = 1")
    return (f"dp_sync={_sync_method(p)!r} with cp={p.cp} runs on unsharded replicas (the cp ranks of a replica "
            f"average their gradients, then the method runs across replicas): needs sharding='none' "
            f"(got {p.sharding!r})")


RULES: tuple[Rule, ...] = (
    Rule("degrees-positive",
         lambda c, m, k: c.xp.any_of([c[n] <= 0 for n in _POSITIVE] + [c["seq_len"] < 0]),
         lambda p, m, k: _first_nonpositive(p) if any(getattr(p, n) <= 0 for n in _POSITIVE)
         else f"seq_len={p.seq_len} must be > 0"),
    Rule("tp-grid-shape", lambda c, m, k: grid.bad_shape(c, m), lambda p, m, k: grid.shape_message(p, m)),
    Rule("tp-grid-split", lambda c, m, k: grid.bad_split(c, m), lambda p, m, k: grid.split_message(p, m)),
    Rule("tp-grid-scope", lambda c, m, k: grid.bad_scope(c, m), lambda p, m, k: grid.scope_message(p, m)),
    Rule("tp-divides-heads", lambda c, m, k: m.num_heads % c["tp"] != 0,
         lambda p, m, k: f"tp={p.tp} must divide num_heads={m.num_heads}"),
    Rule("tp-fits-kv-heads",
         lambda c, m, k: (m.mla is None) & (m.num_kv_heads % c["tp"] != 0) & (c["tp"] % m.num_kv_heads != 0),
         lambda p, m, k: f"tp={p.tp} must divide num_kv_heads={m.num_kv_heads} (or be a multiple of it)"),
    Rule("tp-divides-ffn", lambda c, m, k: m.ffn_hidden_size % c["tp"] != 0,
         lambda p, m, k: f"tp={p.tp} must divide ffn_hidden_size={m.ffn_hidden_size}"),
    Rule("tp-divides-expert-ffn",
         lambda c, m, k: c.full(False) if not m.moe else m.moe.expert_ffn_hidden_size % c["tp"] != 0,
         lambda p, m, k: f"tp={p.tp} must divide moe.expert_ffn_hidden_size={m.moe.expert_ffn_hidden_size if m.moe else 0}"),
    Rule("pipeline-fits-layers", lambda c, m, k: c["pp"] * c["vpp"] > m.num_layers,
         lambda p, m, k: f"pp*vpp={p.pp * p.vpp} must be <= num_layers={m.num_layers}"),
    Rule("vpp-needs-interleaved", lambda c, m, k: (c["vpp"] > 1) & c.xp.not_(c.is_("schedule", "interleaved")),
         lambda p, m, k: f"vpp={p.vpp} needs schedule='interleaved' (got {p.schedule!r})"),
    Rule("interleaved-micro-batches",
         lambda c, m, k: c.is_("schedule", "interleaved") & (c["pp"] > 1) & (c.num_micro_batches % c["pp"] != 0),
         lambda p, m, k: (f"interleaved schedule needs micro-batches per step ({p.num_micro_batches}) "
                          f"divisible by pp={p.pp}")),
    Rule("recompute-layers-fit",
         lambda c, m, k: c.is_("recompute", "full") & (c["recompute_layers"] > _stage_layers(c, m)),
         lambda p, m, k: f"recompute_layers={p.recompute_layers} must be <= layers per stage={-(-m.num_layers // p.pp)}"),
    Rule("swap-layers-fit",
         lambda c, m, k: c["swap_activations"] & (c["swap_layers"] > _stage_layers(c, m)),
         lambda p, m, k: f"swap_layers={p.swap_layers} must be <= layers per stage={-(-m.num_layers // p.pp)}"),
    Rule("batch-divides", lambda c, m, k: c["global_batch"] % (c["micro_batch"] * c.dp) != 0,
         lambda p, m, k: (f"global_batch={p.global_batch} must be divisible by micro_batch*dp="
                          f"{p.micro_batch}*{p.dp}={p.micro_batch * p.dp}")),
    Rule("context-parallel-split",  # the ring's (and LSS') head-tail chunks; Ulysses' contiguous slices
         lambda c, m, k: (c["cp"] > 1) & (_seq(c, m) % c.xp.where(c.is_("cp_attention", "ulysses"), c["cp"],
                                                                  2 * c["cp"]) != 0),
         lambda p, m, k: (f"seq_len={p.seq_len or m.seq_len} must be divisible by cp={p.cp} (Ulysses' sequence "
                          "slices)" if p.cp_attention == "ulysses" else
                          f"seq_len={p.seq_len or m.seq_len} must be divisible by 2*cp={2 * p.cp} "
                          "(load-balanced causal split)")),
    Rule("ulysses-divides-heads",
         lambda c, m, k: (c["cp"] > 1) & c.is_("cp_attention", "ulysses") & ((m.num_heads // c["tp"]) % c["cp"] != 0),
         lambda p, m, k: (f"cp_attention='ulysses' splits the heads of a tp rank over the cp ranks: cp={p.cp} must "
                          f"divide num_heads/tp={m.num_heads}/{p.tp}={m.num_heads // p.tp}")),
    Rule("expert-parallel-needs-moe", lambda c, m, k: (c["ep"] > 1) & (m.moe is None),
         lambda p, m, k: f"ep={p.ep} needs a mixture-of-experts model ({m.name} is dense)"),
    Rule("ep-divides-experts",
         lambda c, m, k: c.full(False) if not m.moe else m.moe.num_experts % c["ep"] != 0,
         lambda p, m, k: f"ep={p.ep} must divide moe.num_experts={m.moe.num_experts if m.moe else 0}"),
    Rule("ep-divides-dp-cp", lambda c, m, k: (c.dp * c["cp"]) % c["ep"] != 0,
         lambda p, m, k: f"ep={p.ep} must divide dp*cp={p.dp * p.cp}"),
    Rule("shard-group-needs-sharding", lambda c, m, k: c.is_("sharding", "none") & (c["dp_shard"] > 1),
         lambda p, m, k: f"dp_shard={p.dp_shard} needs sharding zero1/zero2/zero3 (sharding='none')"),
    Rule("offload-params-needs-zero3", lambda c, m, k: c["offload_params"] & c.xp.not_(c.is_("sharding", "zero3")),
         lambda p, m, k: f"offload_params needs sharding='zero3' (got {p.sharding!r})"),
    Rule("swap-activations-without-recompute",  # both trade time for activation memory; together not modelled
         lambda c, m, k: c["swap_activations"] & c.xp.not_(c.is_("recompute", "none")),
         lambda p, m, k: f"swap_activations needs recompute='none' (got {p.recompute!r}): swapping replaces "
                         "recomputation (Megatron-Core refuses cpu_offloading with recompute too)"),
    Rule("precision-supported",
         lambda c, m, k: ((c.is_("precision", "fp8") & ("fp8" not in k.accelerator.peak_tflops))
                          | (c.is_("precision", "tf32") & ("tf32" not in k.accelerator.peak_tflops))),
         lambda p, m, k: f"precision={p.precision} is not supported by {k.accelerator.name}"
                         + ("" if p.precision == "fp8" else " (its datasheet states no TF32 tensor rate; use fp32)")),
    Rule("dp-sync-modelled", lambda c, m, k: _sync_unmodelled(c),
         lambda p, m, k: f"dp_sync method {_sync_method(p)!r} is not modelled yet (modelled: {', '.join(MODELLED)})",
         method_only=True),
    Rule("dp-sync-no-context-parallel",
         lambda c, m, k: (c["dp_sync"] != 0) & (((c["cp"] > 1) & c.xp.not_(c.is_("sharding", "none"))) | (c["ep"] > 1)),
         lambda p, m, k: _sync_split_message(p), method_only=True),
    Rule("dp-sync-whole-gradients",
         lambda c, m, k: c.sync_rows(lambda s: s.whole_gradients) & c.xp.not_(c.is_("sharding", "none")),
         lambda p, m, k: (f"dp_sync={_sync_method(p)!r} reduces each replica's whole gradient and needs "
                          f"sharding='none' (got sharding={p.sharding!r})"), method_only=True),
    Rule("dp-sync-dreamddp-unsharded",
         lambda c, m, k: c.sync_rows(lambda s: s.partial_averaging) & c.xp.not_(c.is_("sharding", "none")),
         lambda p, m, k: (f"dp_sync='dreamddp' averages each layer's parameters from its gradient hook during the "
                          f"backward pass and needs sharding='none' (got sharding={p.sharding!r}: FSDP owns them)"),
         method_only=True),
    Rule("dp-sync-average-whole-replicas",
         lambda c, m, k: c.sync_rows(lambda s: s.infrequent) & c.xp.not_(c.is_("sharding", "none"))
         & (c["dp_replicate"] == 1),
         lambda p, m, k: (f"dp_sync={_sync_method(p)!r} averages whole replicas, but sharding={p.sharding!r} over all "
                          f"{p.dp} data-parallel ranks leaves none: shard within replicas (dp_replicate > 1, HSDP)"),
         method_only=True),
    Rule("dp-sync-server-ranks-whole-replicas",
         lambda c, m, k: c.sync_rows(lambda s: s.server_ranks > 0) & ((c["tp"] > 1) | (c["pp"] > 1) | (c["cp"] > 1)),
         lambda p, m, k: (f"dp_sync={p.dp_sync.spec!r} exchanges whole replicas with its server ranks and needs "
                          f"tp = pp = cp = 1 (got tp={p.tp}, pp={p.pp}, cp={p.cp})"), method_only=True),
    Rule("dp-sync-learners-whole-replicas",
         lambda c, m, k: c.sync_rows(lambda s: s.whole_learners)
         & ((c["tp"] > 1) | (c["pp"] > 1) | (c["cp"] > 1) | c.xp.not_(c.is_("sharding", "none"))),
         lambda p, m, k: (f"dp_sync={p.dp_sync.spec!r} trains whole model replicas as learners inside each rank and "
                          f"needs tp = pp = cp = 1 and sharding='none' (got tp={p.tp}, pp={p.pp}, cp={p.cp}, "
                          f"sharding={p.sharding!r})"), method_only=True),
    Rule("dp-sync-learners-split-micro-batch",
         lambda c, m, k: c["micro_batch"] % c.sync_values(lambda s: s.learners, 1) != 0,
         lambda p, m, k: (f"dp_sync={p.dp_sync.spec!r}: learners={p.dp_sync.learners} must divide "
                          f"micro_batch={p.micro_batch} (each learner takes an equal share of it)"), method_only=True),
    Rule("dp-sync-hybrid-whole-layers",
         lambda c, m, k: _hybrid_servers(c)
         & (c.sync_rows(lambda s: s.server_ranks > 0) | (c["tp"] > 1) | (c["pp"] > 1)),
         lambda p, m, k: (f"dp_sync={p.dp_sync.spec!r}: hybrid sends whole linear layers' factors between the replicas "
                          f"and needs host=ranks and tp = pp = 1 (got tp={p.tp}, pp={p.pp})"), method_only=True),
    Rule("dp-sync-servers-within-replicas",
         lambda c, m, k: c.sync_values(lambda s: s.replica_servers, 0) > c.dp,
         lambda p, m, k: (f"dp_sync param_server servers={p.dp_sync.servers} must be at most "
                          f"the dp={p.dp} replicas that host them (host=ranks)"), method_only=True),
    Rule("dp-sync-switch-aggregates",
         lambda c, m, k: c.sync_rows(lambda s: s.in_network)
         & c.xp.not_(_meets_on_aggregating_tier(c, k)),
         lambda p, m, k: (f"dp_sync switch_aggregation needs switches that aggregate where the dp={p.dp} replicas "
                          f"meet, but tier {_meeting_tier(p, k).name!r} of cluster {k.name} does not (give the tier "
                          "an 'aggregation' table)"), method_only=True),
    Rule("dp-sync-dense-model",
         lambda c, m, k: (c["dp_sync"] != 0) & c.full(bool(m.moe or m.mla or m.qk_norm)),
         lambda p, m, k: (f"dp_sync={_sync_method(p)!r} is modelled for dense models with standard attention "
                          f"({m.name} has {'experts' if m.moe else 'latent attention' if m.mla else 'qk-norm'})"),
         method_only=True),
    Rule("cluster-size", lambda c, m, k: c.num_gpus > k.max_gpus,
         lambda p, m, k: f"plan needs {p.num_gpus} GPUs but cluster {k.name} has {k.max_gpus}"),
)


_ALLREDUCE_RULES = tuple((i, rule) for i, rule in enumerate(RULES) if not rule.method_only)
"""(index, rule) of the rules a plan that all-reduces can break."""


def _meeting_tier(p: Plan, k: Cluster) -> Any:
    """The outermost tier the plan's data-parallel replicas (``tp`` ranks apart) cross."""
    return k.tiers[k.tier_index(min(p.tp * (p.dp - 1) + 1, k.max_gpus))]


def _meets_on_aggregating_tier(c: PlanColumns, k: Cluster) -> Any:
    """Per row, whether the tier the replicas meet on aggregates in the network."""
    if c.xp.scalar:
        return _meeting_tier(c.single, k).aggregation is not None  # type: ignore[arg-type]
    import numpy as np  # columns only: a single plan's estimate runs without numpy

    extent = np.minimum(c["tp"] * (c.dp - 1) + 1, k.max_gpus)
    index = np.searchsorted(np.array([t.span_gpus for t in k.tiers]), extent)
    capable = np.array([t.aggregation is not None for t in k.tiers] + [False])
    return capable[index]


def broken_rule_index(cols: PlanColumns, model: ModelSpec, cluster: Cluster) -> np.ndarray:
    """Per row, the index of the first broken rule in ``RULES`` (-1 when valid); of a single plan, an int
    (its rules checked in order, so that later rules never see a zero degree)."""
    if cols.single is not None:  # the all-reduce: the method-only rules hold
        rules = _ALLREDUCE_RULES if cols.single.dp_sync.is_allreduce else enumerate(RULES)
        return next((i for i, rule in rules if rule.broken(cols, model, cluster)), -1)  # type: ignore[return-value]
    import numpy as np  # columns only: a single plan's estimate runs without numpy

    first = np.full(len(cols), -1, dtype=np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):  # rows with a zero degree fail the first rule anyway
        for index, rule in enumerate(RULES):
            mask = np.asarray(rule.broken(cols, model, cluster), dtype=bool) & (first < 0)
            first[mask] = index
    return first


def first_violation(plan: Plan, model: ModelSpec, cluster: Cluster,
                    cols: PlanColumns | None = None) -> tuple[str, str] | None:
    """The first broken rule as ``(rule name, reason)``, or ``None`` when the plan is valid (``cols``: the plan as
    columns, when the caller has them)."""
    index = int(broken_rule_index(cols if cols is not None else PlanColumns.one(plan), model, cluster))
    if index < 0:
        return None
    rule = RULES[index]
    return rule.name, rule.message(plan, model, cluster)


def check_plan(plan: Plan, model: ModelSpec, cluster: Cluster, num_gpus: int | None = None,
               cols: PlanColumns | None = None) -> None:
    """Raise :class:`ConfigError` naming the first broken rule."""
    found = first_violation(plan, model, cluster, cols)
    if found:
        raise ConfigError(found[1])
    check_stages(plan, model)
    for stage in range(1, len(plan.stage_sharding)):  # a stage sharded its own way meets the uniform rules as it runs
        if plan.stage_sharding[stage] != plan.sharding and (found := first_violation(plan.for_stage(stage), model,
                                                                                      cluster)):
            raise ConfigError(f"stage {stage} (stage_sharding={plan.stage_sharding[stage]!r}): {found[1]}")
    for stage in range(1, len(plan.stage_tp)):  # a stage of its own TP degree meets the uniform rules at that degree
        if plan.stage_tp[stage] != plan.tp and (found := stage_violation(plan.for_stage(stage), model, cluster)):
            raise ConfigError(f"stage {stage} (stage_tp={plan.stage_tp[stage]}): {found}")
    if num_gpus is not None and plan.num_gpus != num_gpus:
        product = f"dp*cp*sum(stage_tp)={plan.dp}*{plan.cp}*{sum(plan.stage_tp)}" if plan.stage_tp else \
            f"pp*dp*cp*tp={plan.pp}*{plan.dp}*{plan.cp}*{plan.tp}"
        raise ConfigError(f"{product}={plan.num_gpus} must equal gpus={num_gpus}")


def stage_violation(stage: Plan, model: ModelSpec, cluster: Cluster) -> str | None:
    """The first rule but the cluster's size (checked on the whole plan) that one stage's uniform plan breaks."""
    cols = PlanColumns.one(stage)
    return next((rule.message(stage, model, cluster) for rule in RULES
                 if rule.name != "cluster-size" and rule.broken(cols, model, cluster)), None)


def warnings(plan: Plan, model: ModelSpec, cluster: Cluster) -> list[str]:
    """Options that have no effect or leave the fast path (STYLE.md rule 11: warn)."""
    out = []
    if plan.sp and plan.tp == 1:
        out.append("sp has no effect with tp=1")
    if plan.pp == 1 and (plan.schedule != "1f1b" or plan.vpp > 1):
        out.append(f"schedule={plan.schedule} has no effect with pp=1")
    if plan.cp == 1 and plan.cp_attention != "ring":
        out.append(f"cp_attention={plan.cp_attention} has no effect with cp=1")
    if plan.sharding != "none" and plan.dp_shard == 1:
        out.append(f"sharding={plan.sharding} has no effect with dp_shard=1")
    if plan.recompute != "full" and plan.recompute_layers >= 0:
        out.append("recompute_layers has no effect unless recompute='full'")
    if not plan.swap_activations and plan.swap_layers >= 0:
        out.append("swap_layers has no effect unless swap_activations is on")
    if plan.overlap_chunks > 1 and plan.tp == 1 and not (model.moe and plan.ep > 1):
        out.append(f"overlap_chunks={plan.overlap_chunks} has no effect with tp=1 and no expert parallelism")
    if plan.tp > cluster.scale_up_domain_gpus:
        out.append(f"tp={plan.tp} crosses the scale-up domain ({cluster.scale_up_domain_gpus} GPUs): TP traffic goes over the network")
    return out
