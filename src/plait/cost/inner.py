"""Per-rank, per-layer quantities that depend only on the "inner" knobs of a plan.

Layer time, in-layer collectives, activation bytes and per-rank parameter counts depend
on (tp, sp, cp, ep, micro-batch, sequence, precision, recompute, gradient dtype, TP
overlap) but not on pp, dp, sharding or the schedule. The planner's candidates share few
inner combinations, so each is computed once with the scalar functions of
:mod:`plait.cost.layer`, :mod:`plait.cost.activations` and :mod:`plait.cost.params` and
broadcast to every candidate that has it. The quantities' types are :mod:`plait.cost.inner_values`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from operator import attrgetter
from typing import TYPE_CHECKING

from plait.cost import activations as act
from plait.cost.compute import elementwise_time_s, gemms_fwd_bwd_s
from plait.cost.flops import head_gemm
from plait.cost.host import layer_host_s
from plait.cost.inner_values import ABSENT, Inner, LayerKind
from plait.cost.layer import AttentionPart, attention_part, layer_cost
from plait.cost.loss import loss_bytes_per_logit, metric_bytes_per_logit
from plait.cost.params import layer_split
from plait.cost.setup import Setup
from plait.cost.tp_comm import edge_tp_s
from plait.engine.facts import EngineFacts
from plait.hardware.cluster import Cluster
from plait.kept import Kept
from plait.plan.columns import PlanColumns
from plait.plan.plan import Plan
from plait.workload.model import ModelSpec

if TYPE_CHECKING:
    import numpy as np

INNER_FIELDS = ("tp", "tp_mode", "tp_depth", "sp", "cp", "cp_attention", "ep", "micro_batch", "seq_len", "precision",
                "recompute", "grad_reduce_dtype", "tp_comm_overlap", "overlap_chunks")


def _kind_sizes(setup: Setup, moe_layer: bool) -> dict[str, float]:
    """The fields of one layer kind that memory reads (:data:`MEMORY_KIND_FIELDS`)."""
    dense, expert = layer_split(setup, moe_layer)
    stored, selective = act.stored_bytes(setup, moe_layer)
    return {"activation_bytes": stored, "selective_activation_bytes": selective, "num_params": dense,
            "num_expert_params": expert}


def _kind(setup: Setup, moe_layer: bool, attention: AttentionPart) -> LayerKind:
    model = setup.model
    if moe_layer and not model.moe:
        return ABSENT
    cost = layer_cost(setup, moe_layer, attention)
    host_fwd, host_bwd = layer_host_s(setup, moe_layer)
    below = setup.framework.shard_persist_below
    persistent = [n for n in model.layer_vector_sizes(moe_layer) if n < below]
    if moe_layer and setup.framework.moe_host_sync:  # joined inside the layer's forward (plait.cost.host)
        host_fwd = 0.0
    return LayerKind(
        fwd_s=cost.fwd_compute_s, bwd_s=cost.bwd_compute_s, recompute_s=cost.recompute_s,
        tp_fwd_s=cost.tp_fwd_s, tp_bwd_s=cost.tp_bwd_s, cp_fwd_s=cost.cp_fwd_s, cp_bwd_s=cost.cp_bwd_s,
        ep_fwd_s=cost.ep_fwd_s, ep_bwd_s=cost.ep_bwd_s, host_fwd_s=host_fwd, host_bwd_s=host_bwd,
        num_tensors=float(model.layer_tensor_count(moe_layer)), num_persistent_tensors=float(len(persistent)),
        num_persistent_params=float(sum(persistent)), **_kind_sizes(setup, moe_layer))


def _sizes(setup: Setup) -> dict[str, float]:
    """The fields of :class:`Inner` beside the layer kinds that memory reads (:data:`MEMORY_INNER_FIELDS`)."""
    model, plan = setup.model, setup.plan
    return {"layer_input_bytes": act.layer_input_bytes(setup), "first_stage_bytes": act.first_stage_extra_bytes(setup),
            "last_stage_bytes": act.last_stage_extra_bytes(setup),
            "num_vocab_params": model.vocab_size * model.hidden_size / plan.tp, "grad_bytes": float(setup.grad_bytes),
            "weight_cache_bytes": setup.framework.fp8_weight_cache_bytes if setup.gemm_dtype == "fp8" else 0.0}


def _row(setup: Setup) -> Inner:
    """Every inner quantity of one combination, as floats."""
    if setup.plan.tp_mode != "1d":  # a 2-D/2.5-D grid: 1-D+SP's split of the layer, its own collectives
        return _grid_row(setup)
    model, plan, acc = setup.model, setup.plan, setup.cluster.accelerator
    r, stream = setup.residual_bytes, setup.tokens * model.hidden_size
    head_fwd, head_bwd = gemms_fwd_bwd_s([head_gemm(setup)], setup)
    logits = setup.tokens * model.vocab_size / plan.tp
    loss_s = elementwise_time_s(logits * loss_bytes_per_logit(setup) + 4 * r * stream, acc)  # and the final norm
    metrics_s = elementwise_time_s(logits * metric_bytes_per_logit(setup), acc)  # after the micro-batch's backward
    first_tp_fwd, first_tp_bwd, last_tp_fwd, last_tp_bwd = edge_tp_s(setup)
    return Inner(
        dense=_kind(setup, False, attention := attention_part(setup)), moe=_kind(setup, True, attention),
        embedding_fwd_s=elementwise_time_s(2 * r * stream, acc),  # the lookup writes the hidden states
        embedding_bwd_s=elementwise_time_s(3 * r * stream, acc),  # and scatters their gradient back
        head_fwd_s=head_fwd + loss_s, head_bwd_s=head_bwd + loss_s + metrics_s,
        embedding_tp_fwd_s=first_tp_fwd, embedding_tp_bwd_s=first_tp_bwd, head_tp_fwd_s=last_tp_fwd,
        head_tp_bwd_s=last_tp_bwd,
        p2p_bytes=r * stream / plan.tp,  # the residual stream; scatter/gather optimisation (Narayanan et al. 2021, Sec. 4.1)
        **_sizes(setup))


def _grid_row(setup: Setup) -> Inner:
    """The inner quantities of a plan whose TP group is a grid (:mod:`plait.cost.tp2d`): those of Megatron 1-D with
    sequence parallelism (same FLOPs, activations and matrices per rank), its per-layer TP collectives replaced by
    the grid's, its GEMM times by SUMMA's smaller GEMMs and its layer parameters by the grid's blocks (the
    embedding and output layer stay 1-D over the ``tp`` ranks)."""
    from plait.cost import tp2d  # grid plans only: a 1-D plan's estimate has no use for the module

    base = _row(tp2d.base_setup(setup))
    terms = tp2d.grid_layer(setup)
    dense = base.dense
    recompute = dense.recompute_s
    if setup.plan.recompute == "full":  # the recomputed forward runs the grid's forward
        recompute += terms.gemm_extra_fwd_s + terms.comm_fwd_s - dense.tp_fwd_s
    grid_dense = replace(
        dense, fwd_s=dense.fwd_s + terms.gemm_extra_fwd_s, bwd_s=dense.bwd_s + terms.gemm_extra_bwd_s,
        recompute_s=recompute, tp_fwd_s=terms.comm_fwd_s, tp_bwd_s=terms.comm_bwd_s, num_params=terms.num_params)
    return replace(base, dense=grid_dense)


_KIND_FIELDS = tuple(f.name for f in fields(LayerKind))
_INNER_FIELDS = tuple(f.name for f in fields(Inner) if f.name not in ("dense", "moe"))
MEMORY_KIND_FIELDS = ("activation_bytes", "selective_activation_bytes", "num_params", "num_expert_params")
"""The fields of a layer kind that memory reads (:func:`plait.cost.memory.stage_params`, :func:`plait.cost.memory.
stage_memory`, :func:`plait.cost.swap.resident_activation_bytes`)."""
MEMORY_INNER_FIELDS = ("layer_input_bytes", "first_stage_bytes", "last_stage_bytes", "num_vocab_params", "grad_bytes",
                       "weight_cache_bytes")
"""The fields of :class:`Inner` beside the layer kinds that memory reads."""
UNSIZED = float("nan")
"""Every other field of a memory-only :class:`Inner` (:func:`inner_columns`): a figure read by mistake is NaN."""


@dataclass
class Known:
    """A search's per-layer quantities so far, per combination of :data:`INNER_FIELDS` (its key), so that each
    combination is costed once across the search's chunks: every field (``rows``, of the combinations some row was
    timed for), the fields memory reads alone (``sizes``, :func:`_sized_row`), and the Setup each combination was
    costed with (its derived sizes computed once for both)."""

    rows: dict[tuple[int, ...], Inner] = field(default_factory=dict)
    sizes: dict[tuple[int, ...], Inner] = field(default_factory=dict)
    setups: dict[tuple[int, ...], Setup] = field(default_factory=dict)
    rule_reads: dict[int, frozenset[int]] = field(default_factory=dict)
    """Per pruning rule, the option lists it read (:func:`plait.search.factored.pruned`'s hint)."""
    of: tuple[ModelSpec, Cluster, EngineFacts] | None = None
    """The model, cluster and framework every entry was costed for (the key holds none of them): set by the first
    use, checked by every later one, so that searches sharing these quantities share them only where exact."""

    def check(self, model: ModelSpec, cluster: Cluster, framework: EngineFacts) -> None:
        """Refuse a model, cluster or framework other than the entries': their key does not tell them apart."""
        if self.of is None:
            self.of = (model, cluster, framework)
        assert all(a is b or a == b for a, b in zip(self.of, (model, cluster, framework), strict=True)), (
            "per-layer quantities costed for one model, cluster and framework are not another's"
        )

    def setup(self, key: tuple[int, ...], build: Callable[[], Setup]) -> Setup:
        """The Setup of combination ``key``, built the first time."""
        found = self.setups.get(key)
        if found is None:
            found = self.setups[key] = build()
        return found


def _sized_row(setup: Setup) -> Inner:
    """:func:`_row`'s fields that memory reads (:data:`MEMORY_KIND_FIELDS`, :data:`MEMORY_INNER_FIELDS`), the others
    :data:`UNSIZED`; a grid's layer parameters are the grid's (:func:`_grid_row`), so a grid row is costed whole."""
    if setup.plan.tp_mode != "1d":
        return _row(setup)
    kinds = [ABSENT if moe_layer and not setup.model.moe else
             LayerKind(**{**_UNSIZED_KIND, **_kind_sizes(setup, moe_layer)}) for moe_layer in (False, True)]
    return Inner(dense=kinds[0], moe=kinds[1], **{**_UNSIZED_INNER, **_sizes(setup)})


_UNSIZED_KIND = dict.fromkeys(_KIND_FIELDS, UNSIZED)
_UNSIZED_INNER = dict.fromkeys(_INNER_FIELDS, UNSIZED)


def _columns(rows: list, names: tuple[str, ...], inverse: np.ndarray) -> dict[str, np.ndarray]:  # type: ignore[type-arg]
    """Per field name, the column of ``rows``' values spread to every plan row by ``inverse``."""
    import numpy as np  # array columns only: a single plan's estimate runs without numpy

    table = np.array([[getattr(row, name) for row in rows] for name in names], dtype=np.float64)[:, inverse]
    return {name: table[i] for i, name in enumerate(names)}  # each a contiguous row of the table


def _stack(rows: list[Inner], inverse: np.ndarray, sized: bool = False) -> Inner:
    """The Inner whose every field is the column of ``rows``' values, one entry per plan row (``sized``: only the
    fields memory reads, the others :data:`UNSIZED`). A kind every row lacks stays :data:`ABSENT`, as for one plan:
    its terms, all zero, are skipped rather than added as columns of zeros."""
    names, base = (MEMORY_KIND_FIELDS, _UNSIZED_KIND) if sized else (_KIND_FIELDS, {})
    kinds = [ABSENT if all(getattr(r, k) is ABSENT for r in rows) else
             LayerKind(**{**base, **_columns([getattr(r, k) for r in rows], names, inverse)}) for k in ("dense", "moe")]
    names, base = (MEMORY_INNER_FIELDS, _UNSIZED_INNER) if sized else (_INNER_FIELDS, {})
    return Inner(dense=kinds[0], moe=kinds[1], **{**base, **_columns(rows, names, inverse)})


def inner_columns(model: ModelSpec, cluster: Cluster, cols: PlanColumns, framework: EngineFacts,
                  known: Known | None = None, sized: bool = False) -> Inner:
    """Inner quantities for every row of ``cols`` (rows must have ``seq_len`` filled); floats for one plan.
    ``known``: the combinations costed already for this model, cluster and framework (a search's earlier chunks),
    filled with the new ones. ``sized``: only the fields memory reads (a search's memory screen, which times
    only the rows that may fit), the others :data:`UNSIZED`."""
    if cols.single is not None:
        return _single(model, cluster, cols.single, framework)
    import numpy as np  # array columns only: a single plan's estimate runs without numpy

    from plait.plan.keys import distinct_rows

    columns = [cols[f].astype(np.int64) for f in INNER_FIELDS]
    if framework.fsdp_casts_params:  # the residual stream's width depends on whether FSDP manages the row
        columns.append(cols.fsdp_managed.astype(np.int64))
    if len(cols) == 1:  # one plan (plait estimate): nothing to deduplicate
        first, inverse = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    else:
        first, inverse = distinct_rows(*columns)
    known = Known() if known is None else known
    known.check(model, cluster, framework)
    keys = [tuple(key) for key in np.stack(columns)[:, first].T.tolist()]
    table = known.sizes if sized else known.rows
    unseen = [j for j, key in enumerate(keys) if key not in known.setups and key not in known.rows]
    plans = dict(zip(unseen, cols.plans(first[unseen]))) if unseen else {}  # built together: cheaper than one by one
    rows = []
    for j, key in enumerate(keys):
        found = known.rows.get(key, table.get(key))
        if found is None:
            setup = known.setup(key, lambda: Setup(model=model, cluster=cluster, plan=plans[j], framework=framework))
            found = table[key] = (_sized_row if sized else _row)(setup)
        rows.append(found)
    return _stack(rows, inverse.reshape(-1), sized)


OUTER_FIELDS = frozenset({"pp", "vpp", "schedule", "dp_replicate", "dp_shard", "global_batch", "sharding"})
"""Plan fields no inner quantity reads (the module docstring; sharding and the data-parallel degrees only through
:attr:`Plan.fsdp_managed`, which the single-plan key holds)."""
_KEYED = attrgetter(*(f.name for f in fields(Plan) if f.name not in OUTER_FIELDS))
"""A plan's values of every field but :data:`OUTER_FIELDS`, as a tuple."""
_SINGLES: Kept[Inner] = Kept(256)


def _single(model: ModelSpec, cluster: Cluster, plan: Plan, framework: EngineFacts) -> Inner:
    """:func:`_row` of one plan, kept for the last 256 combinations costed: estimates of plans that
    differ only in :data:`OUTER_FIELDS` (a planner's top plans, a validation's rows, an estimate repeated) share
    it. Keyed by every other plan field and by the identity of the model, cluster and cost facts, which the entry
    holds (frozen objects: the same object is the same value, and its id is not reused while the entry lives)."""
    key = (id(model), id(cluster), id(framework), plan.fsdp_managed, *_KEYED(plan))
    return _SINGLES.get(key, (model, cluster, framework),
                        lambda: _row(Setup(model=model, cluster=cluster, plan=plan, framework=framework)))
