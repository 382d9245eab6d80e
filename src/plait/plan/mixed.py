"""A plan over a mixed cluster: one parallel layout, and how its work is shared among device groups.

Two ways to share it, as the heterogeneous planners of the field do:
- ``data``: data-parallel replicas on every group, each group's replicas with their own local batch — Poplar's
  per-GPU batch allocation under ZeRO (Zhang et al., 2023, SEEDS 001-16), Hogbatch's CPU and GPU workers (001-20);
  with ``local_sgd``, each group its own number of local steps per averaging (000-17: fast devices take more).
- ``pipeline``: pipeline stages on different groups with uneven layer counts (Metis, Um et al. ATC 2024; AMP,
  Li et al. NeurIPS 2022; FlashFlex, Yan et al. 2024): a stage's layers in proportion to its devices' speed.

``plan`` is the job's layout over all its GPUs (``plan.num_gpus`` = the shares' GPUs); ranks fill the shares in
order, so a share's ranks are consecutive (tp fastest, pp slowest: :mod:`plait.plan.plan`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from plait.errors import ConfigError
from plait.plan.per_stage import check_stages, stage_degrees, stage_tp_refusal
from plait.plan.plan import Plan, Recompute
from plait.workload.model import ModelSpec

if TYPE_CHECKING:  # a plan file's reader imports this module; a plain estimate never loads mixed clusters
    from plait.hardware.mixed import MixedCluster

Split = Literal["data", "pipeline"]
SPLITS: tuple[Split, ...] = ("data", "pipeline")


@dataclass(frozen=True, kw_only=True)
class GroupShare:
    """The part of a mixed plan one device group runs."""

    group: str
    """Name of the device group (:class:`plait.hardware.mixed.DeviceGroup`)."""
    num_gpus: int
    """Devices of that group the plan uses."""
    batch: int = 0
    """``data`` split: sequences per step the group's replicas run together (an equal share each)."""
    layers: tuple[int, ...] = ()
    """``pipeline`` split: layers of each pipeline stage on this group, in stage order."""
    local_steps: int = 1
    """``data`` split with ``local_sgd``: local steps the group takes per averaging round."""
    micro_batch: int = 0
    """``data`` split: the group's own micro-batch (0: the layout's). Gradient accumulation changes no numerics
    beyond float rounding, so replicas of different micro-batches still all-reduce together."""
    recompute: Recompute | Literal[""] = ""
    """``data`` split: the group's own recomputation mode, all of its layers (empty: the layout's); recomputation
    changes no numerics either (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost", Sec. 3)."""

    @property
    def varies(self) -> bool:
        """Whether the group runs its own variant of the layout (:func:`share_layout`)."""
        return bool(self.micro_batch or self.recompute)


def share_layout(plan: Plan, share: GroupShare) -> Plan:
    """The layout ``share``'s group runs: ``plan`` with the share's own micro-batch and recomputation mode where it
    gives them (full recomputation of every layer)."""
    if not share.varies:
        return plan
    if not share.recompute:
        return replace(plan, micro_batch=share.micro_batch or plan.micro_batch)
    return replace(plan, micro_batch=share.micro_batch or plan.micro_batch, recompute=share.recompute,
                   recompute_layers=-1)


@dataclass(frozen=True, kw_only=True)
class MixedPlan:
    """A layout and its shares. Validate with :func:`check_mixed_plan`."""

    plan: Plan
    """The job's layout over all its GPUs (its ``global_batch`` is the shares' total)."""
    split: Split
    """How work is shared: ``data`` (replicas) or ``pipeline`` (stages)."""
    shares: tuple[GroupShare, ...]
    """Each group's share, in rank order."""

    @property
    def num_gpus(self) -> int:
        """Devices the plan uses."""
        return sum(s.num_gpus for s in self.shares)

    def describe(self) -> str:
        """The layout and its shares, e.g. ``tp1 dp16 zero1 mb2 gb256 | a100 8 GPUs b64, h100 8 GPUs b192``."""
        def one(s: GroupShare) -> str:
            what = (f"b{s.batch}" + (f" x{s.local_steps} local steps" if s.local_steps > 1 else "") + variant_label(s)
                    if self.split == "data" else "layers " + "+".join(map(str, s.layers)))
            return f"{s.group} {s.num_gpus} GPUs {what}"

        return f"{self.plan.describe()} | {self.split}: " + ", ".join(one(s) for s in self.shares)


def variant_label(share: GroupShare) -> str:
    """`` mb1 rc-full`` for a share with its own micro-batch and recomputation ('' for one that runs the layout's)."""
    return (f" mb{share.micro_batch}" if share.micro_batch else "") + (f" rc-{share.recompute}" if share.recompute
                                                                          else "")


UNEVEN_BATCH_AXES = ("pp", "tp", "cp", "ep")
"""Axes a run with unequal batches per data-parallel replica refuses: plait's runtime slices each replica's rows
by its data-parallel rank alone and weights its loss (:mod:`plait.run.uneven`); its parity is tested on
``dp_replicate`` and ``dp_shard`` (tests/test_uneven_run.py), not with model-parallel ranks inside a replica."""


def uneven_batch_refusal(plan: Plan) -> str | None:
    """Why ``plan``'s runtime cannot give its replicas unequal batches (``None``: it can)."""
    for axis in UNEVEN_BATCH_AXES:
        if getattr(plan, axis) > 1:
            return (f"unequal batches per replica with {axis}={getattr(plan, axis)}: run with data parallelism alone "
                    "(dp_replicate, dp_shard)")
    if not (plan.dp_sync.is_allreduce or plan.dp_sync.group_local_steps):
        return f"unequal batches per replica with dp_sync={plan.dp_sync.spec!r}: run with the all-reduce or local SGD"
    return None


def replica_batches(mixed: MixedPlan) -> tuple[int, ...]:
    """A data split's sequences per step of each data-parallel replica, in rank order."""
    out: list[int] = []
    for s in mixed.shares:
        replicas = s.num_gpus // mixed.plan.model_parallel
        out += [s.batch // replicas] * replicas
    return tuple(out)


def replica_micro_batches(mixed: MixedPlan | None) -> tuple[int, ...]:
    """A data split's micro-batch of each data-parallel replica, in rank order, where some group runs its own
    (:attr:`GroupShare.micro_batch`); empty otherwise (every replica takes the layout's)."""
    if mixed is None or mixed.split != "data" or not any(s.micro_batch for s in mixed.shares):
        return ()
    return tuple(s.micro_batch or mixed.plan.micro_batch
                 for s in mixed.shares for _ in range(s.num_gpus // mixed.plan.model_parallel))


def per_stage_plan(mixed: MixedPlan) -> Plan:
    """The plan a pipeline split whose groups take their own TP degree runs: its layout with each stage's layers
    from the shares (:attr:`Plan.stage_layers`, what :mod:`plait.run.stage_tp` trains); any other mixed plan's
    layout as it is (its shares arrive as the runtime's uneven options, :mod:`plait.run.mixed_run`)."""
    if mixed.split != "pipeline" or not mixed.plan.stage_tp:
        return mixed.plan
    return replace(mixed.plan, stage_layers=tuple(n for s in mixed.shares for n in s.layers))


def rank_layout(plan: Plan, mixed: MixedPlan | None, rank: int) -> Plan:
    """The layout global rank ``rank`` runs: ``plan`` with its group's own micro-batch and recomputation where a
    data split's share gives them (:func:`share_layout`)."""
    if mixed is None or mixed.split != "data":
        return plan
    return share_layout(plan, rank_share(mixed, rank))


def rank_share(mixed: MixedPlan, rank: int) -> GroupShare:
    """The share global rank ``rank`` runs (ranks fill the shares in order)."""
    at = 0
    for share in mixed.shares:
        at += share.num_gpus
        if rank < at:
            return share
    raise ConfigError(f"rank {rank} is outside the plan's {mixed.num_gpus} GPUs")


def run_refusal(mixed: MixedPlan) -> str | None:
    """Why ``plait run`` cannot execute ``mixed`` from its plan file (``None``: it can): a data split whose replicas
    take unequal batches, or whose groups run their own micro-batch or recomputation, needs :func:`uneven_batch_refusal`'s layouts; a pipeline split's uneven stages and a data
    split's per-group local steps run with any layout :func:`check_mixed_plan` accepts, groups at their own TP degree
    within the stage-TP loop's scope (:func:`plait.plan.per_stage.stage_tp_refusal`). The mixed planner ranks only
    plans this accepts."""
    if mixed.split == "data" and (len(set(replica_batches(mixed))) > 1 or any(s.varies for s in mixed.shares)):
        return uneven_batch_refusal(mixed.plan)
    refusal = stage_tp_refusal(mixed.plan)  # groups at their own TP degree: the stage-TP loop's scope
    if refusal:
        return refusal
    if mixed.plan.dp_sync.site_aware:
        return (f"dp_sync={mixed.plan.dp_sync.spec}: plait run lays a mixed plan's groups out as one fabric, not as "
                "sites (per-tier compression across groups is costed, not run)")
    return None


def even_shares(layout: Plan, shares: tuple[GroupShare, ...] | list[GroupShare]) -> tuple[GroupShare, ...]:
    """``shares`` with the batches an even data split gives them: each group as near its replicas' share of the
    global batch as whole micro-batches on each of its replicas allow (the largest-remainder method, groups that
    fall furthest short first), so that the batches sum to the global batch when ``dp`` does not divide it."""
    units = [s.num_gpus // layout.model_parallel * layout.micro_batch for s in shares]
    if not all(units):  # a group too small for one replica: no data split (check_mixed_plan says why)
        return tuple(replace(s, batch=0) for s in shares)
    ideal = [layout.global_batch * (s.num_gpus // layout.model_parallel) / layout.dp for s in shares]
    batches = [int(want // unit) * unit for want, unit in zip(ideal, units, strict=True)]
    left = layout.global_batch - sum(batches)
    for i in sorted(range(len(shares)), key=lambda i: batches[i] - ideal[i]):
        while left >= units[i] and batches[i] < ideal[i]:
            batches[i], left = batches[i] + units[i], left - units[i]
    for i in sorted(range(len(shares)), key=lambda i: units[i]):
        while left >= units[i]:
            batches[i], left = batches[i] + units[i], left - units[i]
    if left:
        batches = _exact_split(layout.global_batch, units, ideal)
    return tuple(replace(s, batch=b) for s, b in zip(shares, batches, strict=True))


def _exact_split(total: int, units: list[int], ideal: list[float]) -> list[int]:
    """Batches of whole ``units`` (at least one each) summing to ``total``, each group in turn from the last as
    near its ``ideal`` as the groups before it can still make up the rest; :class:`ConfigError` where none exist.
    Which sums the first groups reach is kept as the bits of one integer per prefix (a subset-sum table)."""
    reach = [1]  # reach[g]: bit t set where groups before g can sum to t
    for unit in units:
        bits = 0
        for k in range(1, total // unit + 1):
            bits |= reach[-1] << (k * unit)
        reach.append(bits & ((1 << (total + 1)) - 1))
    if not reach[-1] >> total & 1:
        raise ConfigError(f"global_batch={total} cannot be split into whole micro-batches per replica (groups take "
                          f"multiples of {', '.join(map(str, units))} sequences); give --shares")
    batches, rest = [0] * len(units), total
    for g in reversed(range(len(units))):
        counts = sorted(range(1, rest // units[g] + 1), key=lambda k: abs(k * units[g] - ideal[g]))
        k = next(k for k in counts if reach[g] >> (rest - k * units[g]) & 1)
        batches[g], rest = k * units[g], rest - k * units[g]
    return batches


def check_mixed_plan(mixed: MixedPlan, model: ModelSpec, cluster: MixedCluster) -> None:
    """Raise :class:`ConfigError` naming the first broken rule of sharing ``mixed.plan`` over ``cluster``."""
    plan, shares = mixed.plan, mixed.shares
    if mixed.split not in SPLITS:
        raise ConfigError(f"split={mixed.split!r} must be one of {', '.join(SPLITS)}")
    if not shares:
        raise ConfigError("a mixed plan needs at least one group share")
    used: dict[str, int] = {}
    for s in shares:
        used[s.group] = used.get(s.group, 0) + s.num_gpus
        if used[s.group] > cluster.group(s.group).num_gpus:
            raise ConfigError(f"group {s.group}: the plan uses {used[s.group]} GPUs but {cluster.name} has "
                              f"{cluster.group(s.group).num_gpus}")
        if s.num_gpus <= 0 or s.local_steps < 1:
            raise ConfigError(f"group {s.group}: num_gpus={s.num_gpus} must be > 0 and local_steps="
                              f"{s.local_steps} >= 1")
    if plan.stage_recompute or plan.stage_layers or plan.stage_sharding or (plan.stage_tp and
                                                                           mixed.split != "pipeline"):
        raise ConfigError(f"a mixed plan takes stage_tp alone of the per-stage fields, with a pipeline split (its "
                          f"shares give each stage its layers; got {plan.describe()}, split={mixed.split})")
    if mixed.num_gpus != plan.num_gpus:
        raise ConfigError(f"the shares use {mixed.num_gpus} GPUs but the layout {plan.describe()} needs "
                          f"{plan.num_gpus}")
    (_check_data if mixed.split == "data" else _check_pipeline)(mixed, model)


def _check_data(mixed: MixedPlan, model: ModelSpec) -> None:
    plan = mixed.plan
    for s in mixed.shares:
        if s.num_gpus % plan.model_parallel:
            raise ConfigError(f"group {s.group}: num_gpus={s.num_gpus} must be a multiple of tp*pp*cp="
                              f"{plan.model_parallel} (whole replicas)")
        replicas = s.num_gpus // plan.model_parallel
        micro = s.micro_batch or plan.micro_batch
        if s.micro_batch < 0:
            raise ConfigError(f"group {s.group}: micro_batch={s.micro_batch} must be > 0 (0: the layout's)")
        if s.batch <= 0 or s.batch % (replicas * micro):
            raise ConfigError(f"group {s.group}: batch={s.batch} must be a positive multiple of replicas x "
                              f"micro_batch = {replicas * micro}")
        if s.layers:
            raise ConfigError(f"group {s.group}: layers={s.layers} belong to a pipeline split, not a data split")
    total = sum(s.batch for s in mixed.shares)
    if total != plan.global_batch:
        raise ConfigError(f"the shares' batches sum to {total} but global_batch={plan.global_batch}")
    steps = {s.local_steps for s in mixed.shares}
    if steps != {1} and not plan.dp_sync.group_local_steps:
        raise ConfigError(f"local_steps {sorted(steps)} differ from 1 only with dp_sync local_sgd (got "
                          f"{plan.dp_sync.spec})")


def _check_pipeline(mixed: MixedPlan, model: ModelSpec) -> None:
    plan = mixed.plan
    if model.moe is not None:
        raise ConfigError(f"a pipeline split over device groups takes dense models; {model.name} has experts")
    if plan.vpp != 1:
        raise ConfigError(f"a pipeline split over device groups needs vpp=1 (got {plan.vpp})")
    stages = sum(len(s.layers) for s in mixed.shares)
    if stages != plan.pp:
        raise ConfigError(f"the shares hold {stages} stages but pp={plan.pp}")
    if plan.stage_tp:
        check_stages(plan, model)
    at = 0
    for s in mixed.shares:
        if not s.layers or any(n <= 0 for n in s.layers):
            raise ConfigError(f"group {s.group}: layers={s.layers} must list one positive layer count per stage")
        degrees = set(stage_degrees(plan)[at:at + len(s.layers)])
        if len(degrees) > 1:
            raise ConfigError(f"group {s.group}: its stages take one TP degree (stage_tp gives {sorted(degrees)})")
        stage_gpus = degrees.pop() * plan.cp * plan.dp
        if s.num_gpus != len(s.layers) * stage_gpus:
            raise ConfigError(f"group {s.group}: num_gpus={s.num_gpus} must be its {len(s.layers)} stages x "
                              f"tp*cp*dp={stage_gpus}")
        if s.batch or s.local_steps != 1 or s.varies:
            raise ConfigError(f"group {s.group}: batch, local_steps, micro_batch and recompute belong to a data "
                              "split")
        at += len(s.layers)
    layers = sum(sum(s.layers) for s in mixed.shares)
    if layers != model.num_layers:
        raise ConfigError(f"the stages hold {layers} layers but {model.name} has {model.num_layers}")
