"""The capability table: which plan options an engine (and, for plait's runtime, a machine) can execute.

A feature is a named, vectorised predicate over :class:`~plait.plan.columns.PlanColumns` (and the model); an
engine lists the features it cannot run, each with a cited reason (``data/engines.toml``). The planner prunes
those rows (:func:`unsupported_index`), the exporters and ``plait run`` refuse them with one line naming the
option and the engine (:func:`first_unsupported`), and ``plait estimate`` warns. One table, three readers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from plait.engine.engine import Engine
from plait.kept import Kept
from plait.plan.columns import PlanColumns
from plait.plan.plan import Plan
from plait.workload.model import ModelSpec

if TYPE_CHECKING:
    import numpy as np

Mask = Callable[[PlanColumns, ModelSpec], "np.ndarray"]


@dataclass(frozen=True)
class Feature:
    """One plan option (or model trait) an engine may lack."""

    name: str
    describe: Callable[[Plan, ModelSpec], str]
    """The option as the user wrote it, e.g. ``cp=2`` or ``schedule='zb-h1'``."""
    present: Mask


def _model(flag: Callable[[ModelSpec], bool]) -> Mask:
    return lambda c, m: c.full(flag(m))


def _choice(field: str, value: str) -> Feature:
    return Feature(f"{field}={value}", lambda p, m: f"{field}={value!r}", lambda c, m: c.is_(field, value))


def _degree(field: str) -> Feature:
    return Feature(field, lambda p, m: f"{field}={getattr(p, field)}", lambda c, m: c[field] > 1)


def _flag(field: str) -> Feature:
    return Feature(field, lambda p, m: f"{field}=true", lambda c, m: c[field])


def _grid_company(p: Plan) -> str:
    """The options beside a tensor-parallel grid that :func:`_grid_company_mask` finds."""
    found = [f"{k}={getattr(p, k)}" for k in ("dp", "cp", "pp") if getattr(p, k) > 1]
    found += [f"{k}={getattr(p, k)!r}" for k, off in (("sharding", "none"), ("recompute", "none"))
              if getattr(p, k) != off]
    found += [f"{k}=true" for k in ("offload_optimizer", "offload_params", "swap_activations") if getattr(p, k)]
    found += ["precision='fp8'"] if p.precision == "fp8" else []
    return ", ".join(found)


def _grid_layer_misfit(m: ModelSpec) -> str:
    """What of ``m`` a grid's layer (gated MLP, RMSNorm, rotary, no biases: plait/run/tp2d.py) does not build."""
    found = [f"{k}={getattr(m, k)!r}" for k, want in (("mlp", "gated"), ("norm", "rmsnorm"), ("position", "rope"))
             if getattr(m, k) != want]
    return ", ".join(found + (["linear biases"] if m.attention_bias or m.mlp_bias else []))


def _grid_company_mask(c: PlanColumns) -> np.ndarray:
    """Rows whose grid shares the job with data, context or pipeline parallelism, sharding, recomputation,
    offload, activation swapping or fp8 (the grid's SUMMA matmuls are plain ``@`` under autocast)."""
    return ((c.dp * c["cp"] > 1) | (c["pp"] > 1) | c.xp.not_(c.is_("sharding", "none"))
            | c.xp.not_(c.is_("recompute", "none")) | c["offload_optimizer"] | c["offload_params"]
            | c["swap_activations"] | c.is_("precision", "fp8"))


_FEATURES: tuple[Feature, ...] = (
    _degree("tp"), _degree("pp"), _degree("cp"), _degree("ep"),
    Feature("cp_attention=ulysses", lambda p, m: f"cp_attention='ulysses' (cp={p.cp})",
            lambda c, m: (c["cp"] > 1) & c.is_("cp_attention", "ulysses")),
    Feature("cp_attention=lss", lambda p, m: f"cp_attention='lss' (cp={p.cp})",
            lambda c, m: (c["cp"] > 1) & c.is_("cp_attention", "lss")),
    Feature("tp_grid", lambda p, m: f"tp_mode={p.tp_mode!r} (a {p.tp_mode.upper()} tensor-parallel grid)",
            lambda c, m: c.xp.not_(c.is_("tp_mode", "1d"))),
    Feature("tp_grid_model", lambda p, m: f"tp_mode={p.tp_mode!r} with {m.name}'s {_grid_layer_misfit(m)}",
            lambda c, m: c.xp.not_(c.is_("tp_mode", "1d")) & bool(_grid_layer_misfit(m))),
    Feature("tp_grid_with", lambda p, m: f"tp_mode={p.tp_mode!r} with {_grid_company(p)}",
            lambda c, m: c.xp.not_(c.is_("tp_mode", "1d")) & _grid_company_mask(c)),
    Feature("sp", lambda p, m: "sp=true", lambda c, m: c["sp"] & (c["tp"] > 1)),
    *(_choice("schedule", s) for s in ("gpipe", "interleaved", "zb-h1")),
    Feature("schedule=1f1b", lambda p, m: "schedule='1f1b'", lambda c, m: c.is_("schedule", "1f1b") & (c["pp"] > 1)),
    *(_choice("sharding", s) for s in ("zero1", "zero2", "zero3")),
    Feature("hsdp", lambda p, m: f"dp_replicate={p.dp_replicate} with sharding={p.sharding!r} (hybrid sharding)",
            lambda c, m: (c["dp_replicate"] > 1) & (c["dp_shard"] > 1)),
    Feature("zero1_replicated", lambda p, m: f"sharding='zero1' with dp_replicate={p.dp_replicate}",
            lambda c, m: c.is_("sharding", "zero1") & (c["dp_replicate"] > 1)),
    _choice("recompute", "selective"), _choice("recompute", "full"),
    Feature("recompute_layers", lambda p, m: f"recompute_layers={p.recompute_layers} (full recompute of some layers)",
            lambda c, m: c.is_("recompute", "full") & (c["recompute_layers"] >= 0)),
    Feature("recompute_layers_not_half",
            lambda p, m: f"recompute_layers={p.recompute_layers} (not half of the {-(-m.num_layers // p.pp)} layers per stage)",
            lambda c, m: c.is_("recompute", "full") & (c["recompute_layers"] >= 0)
            & (abs(c["recompute_layers"] - -(-m.num_layers // c["pp"]) / 2) > 0.5)),
    _choice("precision", "fp16"), _choice("precision", "fp8"), _choice("grad_reduce_dtype", "bf16"),
    _choice("optimizer", "sgd"),
    Feature("master_weights=false", lambda p, m: "master_weights=false", lambda c, m: c.xp.not_(c["master_weights"])),
    _flag("offload_optimizer"), _flag("offload_params"),
    Feature("offload_optimizer_alone", lambda p, m: "offload_optimizer=true with offload_params=false",
            lambda c, m: c["offload_optimizer"] & c.xp.not_(c["offload_params"])),
    Feature("offload_params_alone", lambda p, m: "offload_params=true with offload_optimizer=false",
            lambda c, m: c["offload_params"] & c.xp.not_(c["offload_optimizer"])),
    _flag("swap_activations"),
    Feature("swap_activations_pp", lambda p, m: f"swap_activations=true with pp={p.pp}",
            lambda c, m: c["swap_activations"] & (c["pp"] > 1)),
    Feature("swap_layers", lambda p, m: f"swap_layers={p.swap_layers} (the activations of some layers swapped)",
            lambda c, m: c["swap_activations"] & (c["swap_layers"] >= 0)),
    Feature("swap_layers_all", lambda p, m: f"swap_layers={p.swap_layers} (every one of the {m.num_layers} layers)",
            lambda c, m: c["swap_activations"] & (c["swap_layers"] >= m.num_layers)),
    _flag("tp_comm_overlap"),
    Feature("overlap_chunks", lambda p, m: f"overlap_chunks={p.overlap_chunks}", lambda c, m: c["overlap_chunks"] > 1),
    Feature("overlap_chunks_cp", lambda p, m: f"overlap_chunks={p.overlap_chunks} with tp={p.tp} and cp={p.cp}",
            lambda c, m: (c["overlap_chunks"] > 1) & (c["tp"] > 1) & (c["cp"] > 1)),
    Feature("overlap_chunks_grid", lambda p, m: f"overlap_chunks={p.overlap_chunks} with tp_mode={p.tp_mode!r}",
            lambda c, m: (c["overlap_chunks"] > 1) & c.xp.not_(c.is_("tp_mode", "1d"))),
    Feature("overlap_chunks_fp8", lambda p, m: f"overlap_chunks={p.overlap_chunks} with tp={p.tp} and precision='fp8'",
            lambda c, m: (c["overlap_chunks"] > 1) & (c["tp"] > 1) & c.is_("precision", "fp8")),
    Feature("overlap_grad_reduce=false", lambda p, m: "overlap_grad_reduce=false", lambda c, m: c.xp.not_(c["overlap_grad_reduce"])),
    Feature("moe", lambda p, m: f"a mixture-of-experts model ({m.name})", _model(lambda m: m.moe is not None)),
    Feature("moe_tp", lambda p, m: f"tp={p.tp} with a mixture-of-experts model ({m.name})",
            lambda c, m: (c["tp"] > 1) & (m.moe is not None)),
    Feature("moe_cp", lambda p, m: f"cp={p.cp} with a mixture-of-experts model ({m.name})",
            lambda c, m: (c["cp"] > 1) & (m.moe is not None)),
    Feature("ep_zero1", lambda p, m: f"ep={p.ep} with sharding='zero1'", lambda c, m: (c["ep"] > 1) & c.is_("sharding", "zero1")),
    Feature("ep_beyond_dp", lambda p, m: f"ep={p.ep} not dividing dp={p.dp}", lambda c, m: (c["ep"] > 1) & (c.dp % c["ep"] != 0)),
    Feature("zero1_tp", lambda p, m: f"sharding='zero1' with tp={p.tp}", lambda c, m: c.is_("sharding", "zero1") & (c["tp"] > 1)),
    Feature("ddp_with_tp", lambda p, m: f"sharding={p.sharding!r} (DDP) over dp*cp={p.dp * p.cp} with tp={p.tp}",
            lambda c, m: (c.is_("sharding", "none") | c.is_("sharding", "zero1")) & (c.dp * c["cp"] > 1)
            & (c["tp"] > 1) & (c["dp_sync"] == 0)),  # the other methods train without DDP
    Feature("tp_comm_overlap_without_sp", lambda p, m: f"tp_comm_overlap=true with tp={p.tp}, sp={str(p.sp).lower()}",
            lambda c, m: c["tp_comm_overlap"] & c.xp.not_(c["sp"] & (c["tp"] > 1))),
    Feature("tp_comm_overlap_cp", lambda p, m: f"tp_comm_overlap=true with cp={p.cp}",
            lambda c, m: c["tp_comm_overlap"] & (c["cp"] > 1)),
    Feature("tp_comm_overlap_selective", lambda p, m: "tp_comm_overlap=true with recompute='selective'",
            lambda c, m: c["tp_comm_overlap"] & c.is_("recompute", "selective")),
    Feature("cp_learned_positions", lambda p, m: f"cp={p.cp} with learned positions ({m.name})",
            lambda c, m: (c["cp"] > 1) & (m.position == "learned")),
    Feature("cp_head_dim", lambda p, m: f"cp={p.cp} with head_dim={m.head_dim}",
            lambda c, m: (c["cp"] > 1) & ((m.head_dim % 8 != 0) | (m.head_dim > 256))),
    Feature("offload_optimizer_zero1", lambda p, m: "offload_optimizer=true with sharding='zero1'",
            lambda c, m: c["offload_optimizer"] & c.is_("sharding", "zero1") & (c.dp > 1)),
    Feature("zb_micro_batches", lambda p, m: f"schedule='zb-h1' with {p.num_micro_batches} micro-batches on pp={p.pp}",
            lambda c, m: c.is_("schedule", "zb-h1") & (c["pp"] > 1)
            & (c.num_micro_batches % c.xp.maximum(1, c.num_micro_batches // c.xp.maximum(c["pp"], 1)) != 0)),
    Feature("pp_fewer_micro_batches", lambda p, m: f"schedule='1f1b' with {p.num_micro_batches} micro-batches on pp={p.pp}",
            lambda c, m: c.is_("schedule", "1f1b") & (c["pp"] > 1) & (c.num_micro_batches < c["pp"])),
    Feature("kv_head_replication", lambda p, m: f"tp={p.tp} with num_kv_heads={m.num_kv_heads}",
            lambda c, m: (m.num_kv_heads % c["tp"] != 0) & (m.mla is None) & c.is_("tp_mode", "1d")),  # a grid
    # splits heads by its side q (plait.plan.tp2d_rules.bad_split)
    Feature("mla", lambda p, m: f"multi-head latent attention ({m.name})", _model(lambda m: m.mla is not None)),
    Feature("alibi", lambda p, m: f"ALiBi positions ({m.name})", _model(lambda m: m.position == "alibi")),
    Feature("local_attention", lambda p, m: f"sliding-window or chunked attention ({m.name})",
            _model(lambda m: m.local_attention is not None and m.local_attention.num_layers > 0)),
    Feature("attention_sinks", lambda p, m: f"attention sinks ({m.name})", _model(lambda m: m.attention_sinks)),
    Feature("router_bias", lambda p, m: f"a router bias ({m.name})",
            _model(lambda m: m.moe is not None and m.moe.router_bias)),
    Feature("learned_positions_sp", lambda p, m: f"learned positions ({m.name}) with sp=true",
            lambda c, m: c["sp"] & (c["tp"] > 1) & (m.position == "learned")),
    Feature("dp_sync", lambda p, m: f"dp_sync={p.dp_sync.spec!r}", lambda c, m: c["dp_sync"] != 0),
    Feature("dp_sync_server_ranks", lambda p, m: f"dp_sync={p.dp_sync.spec!r} (through server ranks beyond the GPUs)",
            lambda c, m: c.sync_rows(lambda s: s.server_ranks > 0)),
)
FEATURES: dict[str, Feature] = {f.name: f for f in _FEATURES}
"""Every feature an engine's ``unsupported`` table may name."""

MACHINES = ("cpu", "cuda")


def _listed(engine: Engine, machine: str | None) -> tuple[tuple[Feature, str], ...]:
    """(feature, reason) the engine cannot run, engine-wide first, then on ``machine``: a function of the engine
    alone, listed once per engine and machine (every estimate asks, :func:`first_unsupported`)."""

    def listing() -> tuple[tuple[Feature, str], ...]:
        pairs = list(engine.unsupported.items())
        if machine is not None:
            pairs += list(engine.machines.get(machine, {}).items())
        return tuple((FEATURES[name], why) for name, why in pairs)

    return _LISTS.get((id(engine), machine), (engine,), listing)


_LISTS: Kept[tuple[tuple[Feature, str], ...]] = Kept(256, per_estimate=False)
""":func:`_listed` by engine identity and machine (engines built with options by tests or sweeps come and go; not
emptied by :func:`plait.kept.empty_all`: a listing of the engine's own table, like a catalog object's derived
figures, not an estimate's result)."""


def unsupported_masks(engine: Engine, machine: str | None = None) -> list[Mask]:
    """The masks of the options ``engine`` cannot run, in :func:`unsupported_index`'s order."""
    return [feature.present for feature, _ in _listed(engine, machine)]


def unsupported_index(cols: PlanColumns, model: ModelSpec, engine: Engine, machine: str | None = None) -> np.ndarray:
    """Per row the index into :func:`reasons` of the first option ``engine`` cannot run (-1: runnable); of a
    single plan (:meth:`PlanColumns.one`), an int."""
    if cols.single is not None:
        return next((i for i, (feature, _) in enumerate(_listed(engine, machine)) if feature.present(cols, model)),
                    -1)  # type: ignore[return-value]
    import numpy as np  # columns only: a single plan's estimate runs without numpy

    first = np.full(len(cols), -1, dtype=np.int64)
    for index, (feature, _) in enumerate(_listed(engine, machine)):
        mask = np.asarray(feature.present(cols, model), dtype=bool) & (first < 0)
        first[mask] = index
    return first


def reasons(engine: Engine, machine: str | None = None) -> list[str]:
    """Reason text per index of :func:`unsupported_index` (for the planner's infeasibility counts)."""
    return [f"{engine.name} cannot run {feature.name}" for feature, _ in _listed(engine, machine)]


def first_unsupported(plan: Plan, model: ModelSpec, engine: Engine, machine: str | None = None,
                      cols: PlanColumns | None = None) -> str | None:
    """One line naming the first option ``engine`` cannot run, the engine and why; ``None`` when it can run all
    (``cols``: the plan as columns, when the caller has them). A stage sharded its own way
    (:attr:`Plan.stage_sharding`) runs as its own uniform plan (:meth:`Plan.for_stage`) and is checked as one."""
    if not engine.unsupported and not engine.machines.get(machine or "", {}):
        return None
    if cols is not None and cols.single is not plan:  # columns of another form of the plan: as they say
        return _first_unsupported(plan, model, engine, machine, cols)
    key = (id(model), id(engine), machine, plan)
    return _REFUSALS.get(key, (model, engine), lambda: _first_unsupported(plan, model, engine, machine, cols))


_REFUSALS: Kept[str | None] = Kept(1024)
""":func:`first_unsupported` of the last plans asked about, by the plan's value and the identity of the model and
engine (:class:`plait.kept.Kept`): a function of these alone, asked again for a plan estimated again."""


def _first_unsupported(plan: Plan, model: ModelSpec, engine: Engine, machine: str | None,
                       cols: PlanColumns | None) -> str | None:
    index = int(unsupported_index(cols if cols is not None else PlanColumns.one(plan), model, engine, machine))
    if index < 0:
        for stage in range(1, len(plan.stage_sharding)):
            if plan.stage_sharding[stage] != plan.sharding and (
                    refusal := first_unsupported(plan.for_stage(stage), model, engine, machine)):
                return f"stage {stage}: {refusal}"
        return None
    feature, why = _listed(engine, machine)[index]
    where = f" on {machine.upper() if machine == 'cpu' else 'CUDA'}" if machine and feature.name in engine.machines.get(
        machine, {}) else ""
    return f"{feature.describe(plan, model)} is not supported by {engine.spec}{where}: {why}"
