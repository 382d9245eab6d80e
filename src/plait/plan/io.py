"""The plan file: TOML with a ``[job]`` table (model, cluster, gpus) and a ``[plan]`` table.

The same file is read by ``plait estimate --plan`` and written by the planner and
``plait run``; unknown keys and wrong types are errors naming the key.

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
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from plait.errors import ConfigError, refuse_overwrite
from plait.plan.plan import Plan
from plait.schema import build


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    """What a plan file says besides the plan, as written (resolved into a :class:`plait.predict.job.Job`)."""

    model: str = ""
    """Model: catalog slug or file path (empty: given on the command line)."""
    cluster: str = ""
    """Cluster: preset slug or file path (empty: given on the command line)."""
    gpus: int = 0
    """GPU count the plan must occupy (0: not checked)."""
    engine: str = ""
    """Engine that runs the plan, ``name[@version][[options]]`` (empty: given on the command line, else the default)."""


def read_plan_file(path: Path) -> tuple[JobSpec, Plan]:
    """Parse a plan file."""
    if not path.is_file():
        raise ConfigError(f"plan file {str(path)!r} does not exist")
    try:
        raw: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"plan file {str(path)!r} is not valid TOML: {exc}") from exc
    unknown = sorted(set(raw) - {"job", "plan"})
    if unknown:
        raise ConfigError(f"{path}: unknown table {unknown[0]!r} (a plan file has [job] and [plan])")
    if "plan" not in raw:
        raise ConfigError(f"{path}: missing [plan] table")
    job = build(JobSpec, raw.get("job", {}), f"{path}:[job]")
    return job, build(Plan, raw["plan"], f"{path}:[plan]")


def plan_to_toml(plan: Plan, job: JobSpec | None = None) -> str:
    """Render a plan file (only non-default plan fields, in declaration order)."""
    import tomli_w

    defaults = Plan()
    body: dict[str, Any] = {}
    if job is not None:
        body["job"] = {k: v for k, v in asdict(job).items() if v}
    body["plan"] = {f.name: getattr(plan, f.name) for f in fields(Plan)
                    if getattr(plan, f.name) != getattr(defaults, f.name)}
    return tomli_w.dumps(body)


def write_plan_file(path: Path, plan: Plan, job: JobSpec | None = None, *, overwrite: bool = False) -> None:
    """Write a plan file; refuses to replace an existing file unless ``overwrite``."""
    refuse_overwrite(path, overwrite)
    path.write_text(plan_to_toml(plan, job), encoding="utf-8")
