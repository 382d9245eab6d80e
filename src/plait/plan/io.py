"""The plan file: TOML with a ``[job]`` table (model, cluster, gpus) and a ``[plan]`` table.

The same file is read by ``plait estimate --plan`` and written by the planner and
``plait run``; unknown keys and wrong types are errors naming the key. What ``[plan]`` does not state takes
the same defaults as the command line (:mod:`plait.plan.defaults`); relative paths in ``[job]`` are relative
to the plan file's folder.

    [job]
    model = "llama3-8b"          # catalog slug, config.json or model TOML path
    cluster = "dgx-h100-ib"      # preset slug or cluster TOML/YAML path
    engine = "torchtitan"        # optional; the engine that runs the plan (plait engines)
    gpus = 8                     # optional; must equal pp*dp*cp*tp

    [plan]
    dp_shard = 8
    sharding = "zero3"
    micro_batch = 1
    global_batch = 128

A plan over a mixed cluster (``cluster`` names one, ``gpus`` the devices it takes: :func:`plait.hardware.mixed.
sliced`) adds how its work is shared among the device groups (:class:`plait.plan.mixed.MixedPlan`), in rank order:

    [mixed]
    split = "data"               # or "pipeline"
    [[mixed.shares]]
    group = "a100"
    num_gpus = 1
    batch = 4                    # data: sequences per step; pipeline: layers = [3]
    local_steps = 4              # data with dp_sync local_sgd: local steps per averaging round

Only ``plait run`` takes such a file (:func:`read_plan_parts`).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from plait.errors import ConfigError, parsing, read_user_file, refuse_overwrite
from plait.plan.defaults import complete_plan
from plait.plan.mixed import SPLITS, GroupShare, MixedPlan
from plait.plan.plan import Plan
from plait.schema import build, table


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    """What a plan file says besides the plan, as written (resolved into a :class:`plait.job.Job`)."""

    model: str = ""
    """Model: catalog slug or file path (empty: given on the command line)."""
    cluster: str = ""
    """Cluster: preset slug or file path (empty: given on the command line)."""
    gpus: int = 0
    """GPU count the plan must occupy (0: not checked)."""
    engine: str = ""
    """Engine that runs the plan, ``name[@version][[options]]`` (empty: given on the command line, else the default)."""
    input_shape: tuple[int, ...] = ()
    """A traced model's (``module:factory``) one example's input shape (empty: the factory's ``example_shape``)."""
    input_dtype: str = ""
    """A traced model's input dtype (empty: the factory's ``input_dtype``, else float32)."""


FILE_SUFFIXES = (".json", ".toml", ".yaml", ".yml")
"""A ``[job]`` model or cluster ending in one of these names a file (else a catalog entry)."""


def _names_file(value: str) -> bool:
    return Path(value).suffix in FILE_SUFFIXES


def job_path_for(value: str, folder: Path) -> str:
    """``value`` (a model or cluster as given on the command line) as a plan file in ``folder`` states it: a file
    path relative to ``folder``, a catalog name as it is."""
    if not _names_file(value):
        return value
    return os.path.relpath(Path(value).resolve(), folder.resolve())


def read_plan_file(path: Path) -> tuple[JobSpec, Plan]:
    """Parse a plan file of one device kind (a mixed plan file is refused: only ``plait run`` takes it)."""
    job, plan, mixed = read_plan_parts(path)
    if mixed is not None:
        raise ConfigError(f"{path}: [mixed] shares the plan over device groups; `plait run --plan {path}` runs it "
                          "(this command takes a plan of one device kind)")
    return job, plan


def read_plan_parts(path: Path) -> tuple[JobSpec, Plan, MixedPlan | None]:
    """Parse a plan file, and its ``[mixed]`` table where it has one."""
    text = read_user_file(path, "plan file")
    try:
        with parsing(path, "plan file"):
            raw: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"plan file {str(path)!r} is not valid TOML: {exc}") from exc
    unknown = sorted(set(raw) - {"job", "plan", "mixed"})
    if unknown:
        raise ConfigError(f"{path}: unknown table {unknown[0]!r} (a plan file has [job], [plan] and, over a mixed "
                          "cluster, [mixed])")
    if "plan" not in raw:
        raise ConfigError(f"{path}: missing [plan] table")
    if not isinstance(raw["plan"], dict) or not isinstance(raw.get("job", {}), dict):
        raise ConfigError(f"{path}: [job] and [plan] must be tables")
    job = build(JobSpec, raw.get("job", {}), f"{path}:[job]")
    beside = {k: str(path.parent / v) for k in ("model", "cluster")
              if _names_file(v := getattr(job, k)) and not Path(v).is_absolute()}
    job = replace(job, **beside)  # paths in a plan file are relative to its folder
    plan = complete_plan(raw["plan"], job.gpus or None, f"{path}:[plan]")
    mixed = _mixed(raw["mixed"], plan, f"{path}:[mixed]") if "mixed" in raw else None
    return job, plan, mixed


def _mixed(raw: Any, plan: Plan, where: str) -> MixedPlan:
    """The ``[mixed]`` table: ``split`` and ``shares`` (:class:`GroupShare` tables)."""
    if not isinstance(raw, dict) or set(raw) != {"split", "shares"} or not isinstance(raw["shares"], list):
        raise ConfigError(f"{where}: must hold split and a list of [[mixed.shares]] tables")
    if plan.stage_recompute or plan.stage_layers or plan.stage_sharding:  # the shares give the stages their layers
        raise ConfigError(f"{where}: a mixed plan takes no stage_recompute, stage_layers or stage_sharding in [plan] "
                          "(its shares give each stage its layers; stage_tp gives each group's stages their TP degree)")
    if raw["split"] not in SPLITS:
        raise ConfigError(f"{where}: split={raw['split']!r} must be one of {', '.join(SPLITS)}")
    shares = tuple(build(GroupShare, table(s, f"{where}.shares[{i}]"), f"{where}.shares[{i}]")
                   for i, s in enumerate(raw["shares"]))
    return MixedPlan(plan=plan, split=raw["split"], shares=shares)


def mixed_table(mixed: MixedPlan) -> dict[str, Any]:
    """``mixed``'s shares as the ``[mixed]`` table states them (fields at their defaults left out)."""
    default = GroupShare(group="", num_gpus=0)
    shares = [{k: list(v) if isinstance(v, tuple) else v for k, v in asdict(s).items()
               if k in ("group", "num_gpus") or v != getattr(default, k)} for s in mixed.shares]
    return {"split": mixed.split, "shares": shares}


ALWAYS_WRITTEN = ("dp_replicate", "dp_shard", "sharding", "sp", "global_batch")
"""Plan fields a plan file states whatever their value: the ones :func:`complete_plan` would otherwise derive."""


def plan_to_toml(plan: Plan, job: JobSpec | None = None, mixed: MixedPlan | None = None) -> str:
    """Render a plan file: the layout (:data:`ALWAYS_WRITTEN`) and every other field that differs from its
    default, in declaration order, and ``mixed``'s shares; reading it back gives ``plan`` (and ``mixed``) exactly."""
    import tomli_w

    defaults = Plan()
    body: dict[str, Any] = {}
    if job is not None:
        body["job"] = {k: v for k, v in asdict(job).items() if v}
    values, default_values = plan.to_dict(), defaults.to_dict()
    body["plan"] = {f.name: values[f.name] for f in fields(Plan)
                    if f.name in ALWAYS_WRITTEN or values[f.name] != default_values[f.name]}
    if mixed is not None:
        body["mixed"] = mixed_table(mixed)
    return tomli_w.dumps(body)


def write_plan_file(path: Path, plan: Plan, job: JobSpec | None = None, *, overwrite: bool = False) -> None:
    """Write a plan file; refuses to replace an existing file unless ``overwrite``."""
    refuse_overwrite(path, overwrite)
    path.write_text(plan_to_toml(plan, job), encoding="utf-8")
