"""Load engines from ``data/engines.toml`` by spec: ``name``, ``name@version``, ``name[key=value,...]``.

Read lazily, once, at the boundary (STYLE.md rule 4). A run option (``torchtitan[compile=false]``) applies the
overrides its table records, with their source, on top of the engine's facts.
"""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import fields, replace
from importlib import resources
from typing import Any

from plait.engine.capability import FEATURES, MACHINES
from plait.engine.engine import Engine
from plait.engine.facts import EngineFacts
from plait.errors import ConfigError, did_you_mean
from plait.schema import build

DEFAULT_ENGINE = "megatron-core"
"""The engine plans are ranked and estimates made for when none is named: Megatron-Core with Transformer Engine,
whose fused kernels are the cost model's defaults (:class:`plait.engine.facts.EngineFacts`)."""

_SPEC = re.compile(r"^(?P<name>[a-z0-9_.-]+?)(?:@(?P<version>[A-Za-z0-9_.-]+))?(?:\[(?P<options>[^\]]*)\])?$")
_SCALARS = {f.name for f in fields(Engine)} - {"name", "framework", "sources", "unsupported", "machines", "options"}


@functools.cache
def _tables() -> dict[str, dict[str, Any]]:
    text = resources.files("plait.engine").joinpath("data").joinpath("engines.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def engine_names() -> list[str]:
    """Keys of the packaged engines (``name`` or ``name@version``)."""
    return sorted(_tables())


def _key(name: str, version: str | None) -> str:
    tables = _tables()
    if version is None:
        if name in tables:
            return name
    else:
        if f"{name}@{version}" in tables:
            return f"{name}@{version}"
        if name in tables and tables[name].get("version") == version:
            return name
    known = ", ".join(engine_names())
    spec = f"{name}{'@' + version if version else ''!s}"
    raise ConfigError(f"unknown engine {spec}{did_you_mean(spec, tables)} (known: {known})")


def _check_features(where: str, table: dict[str, str]) -> None:
    for feature in table:
        if feature not in FEATURES:
            raise ConfigError(f"{where}: unknown capability feature {feature!r} (known: {', '.join(FEATURES)})")


def _build(key: str) -> Engine:
    raw = dict(_tables()[key])
    where = f"engines.toml:{key}"
    framework = build(EngineFacts, raw.pop("framework", {}), f"{where}.framework")
    unsupported = raw.pop("unsupported", {})
    machines = raw.pop("machines", {})
    _check_features(where, unsupported)
    for machine, table in machines.items():
        if machine not in MACHINES:
            raise ConfigError(f"{where}: unknown machine {machine!r} (known: {', '.join(MACHINES)})")
        _check_features(f"{where}.machines.{machine}", table)
    raw.pop("options", None)
    unknown = sorted(set(raw) - _SCALARS - {"sources"})
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}")
    return Engine(name=key.split("@")[0], framework=framework, unsupported=dict(unsupported), machines=machines,
                  **{k: v for k, v in raw.items()})


def _apply(engine: Engine, key: str, name: str, value: str) -> Engine:
    options = _tables()[key].get("options", {})
    if name not in options:
        raise ConfigError(f"engine {engine.name} has no option {name!r} (known: {', '.join(options) or 'none'})")
    if value not in options[name]:
        raise ConfigError(f"engine option {name}={value!r} must be one of {', '.join(options[name])}")
    table = dict(options[name][value])
    source = table.pop("source")
    framework = replace(engine.framework, **table.pop("framework", {}))
    sources = {**engine.sources, f"option {name}={value}": source}
    return replace(engine, framework=framework, sources=sources, options=(*engine.options, (name, value)), **table)


@functools.cache
def get_engine(spec: str = DEFAULT_ENGINE) -> Engine:
    """The engine ``spec`` names, e.g. ``torchtitan``, ``megatron-lm@2021`` or ``llm-foundry[mixed_precision=PURE]``."""
    match = _SPEC.match(spec.strip())
    if not match:
        raise ConfigError(f"engine {spec!r} must read name, name@version or name[key=value,...]")
    key = _key(match["name"], match["version"])
    engine = _build(key)
    for item in filter(None, (match["options"] or "").split(",")):
        if "=" not in item:
            raise ConfigError(f"engine option {item!r} must read key=value")
        name, value = (part.strip() for part in item.split("=", 1))
        engine = _apply(engine, key, name, value)
    return engine
