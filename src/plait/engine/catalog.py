"""Load engines from ``data/engines.toml`` by spec: ``name``, ``name@version``, ``name[key=value,...]``.

Read lazily, once, at the boundary (STYLE.md rule 4). A run option (``torchtitan[compile=false]``) applies the
overrides its table records, with their source, on top of the engine's facts.
"""

from __future__ import annotations

import functools
import re
from dataclasses import fields, replace
from typing import Any

from plait.engine.capability import FEATURES, MACHINES
from plait.engine.engine import Engine
from plait.engine.facts import EngineFacts
from plait.errors import ConfigError, did_you_mean
from plait.packaged import packaged_toml
from plait.schema import build

DEFAULT_ENGINE = "megatron-core"
"""The engine plans are ranked and estimates made for when none is named: Megatron-Core with Transformer Engine,
whose fused kernels are the cost model's defaults (:class:`plait.engine.facts.EngineFacts`)."""

_SPEC = re.compile(r"^(?P<name>[a-z0-9_.-]+?)(?:@(?P<version>[A-Za-z0-9_.-]+))?(?:\[(?P<options>[^\]]*)\])?$")
_SCALARS = {f.name for f in fields(Engine)} - {"name", "framework", "sources", "unsupported", "machines", "options"}


@functools.cache
def _tables() -> dict[str, dict[str, Any]]:
    return packaged_toml("plait.engine", "data", "engines.toml")


def engine_names() -> list[str]:
    """Keys of the packaged engines (``name`` or ``name@version``)."""
    return sorted(_tables())


FAMILIES = {"megatron-lm": "megatron-core", "megatron": "megatron-core", "mcore": "megatron-core"}
"""Names without a version that mean another catalog engine: Megatron-LM trains through Megatron-Core since its
core_r0.x releases (github.com/NVIDIA/Megatron-LM README: "Megatron-Core ... the library behind Megatron-LM"), so a
plain ``megatron-lm`` is today's Megatron-Core; the dated ``megatron-lm@2021``/``@2022`` entries stay as named."""


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def _versions(name: str) -> dict[str, str]:
    """Each catalog version of the engine ``name`` -> its key (``nemo`` -> ``{"24.07": "nemo@24.07"}``)."""
    return {str(table.get("version")): key for key, table in _tables().items() if key.split("@")[0] == name}


def _nearest(asked: str, versions: dict[str, str]) -> str | None:
    """The key of the version nearest ``asked``: compared part by part (year or major first), ties to the newer;
    ``None`` where ``asked`` or no known version reads as numbers."""
    wanted = _numbers(asked)
    numbered = {v: _numbers(v) for v in versions if _numbers(v)}
    if not wanted or not numbered:
        return None

    def distance(version: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        width = max(len(numbered[version]), len(wanted))
        known, asked_parts = (parts + (0,) * (width - len(parts)) for parts in (numbered[version], wanted))
        return tuple(abs(a - b) for a, b in zip(known, asked_parts)), tuple(-x for x in known)

    return versions[min(numbered, key=distance)]


def _label(key: str) -> str:
    """``name@version`` of a catalog key (``torchtitan`` -> ``torchtitan@0.3.0``)."""
    return key if "@" in key else f"{key}@{_tables()[key].get('version')}"


def _key(name: str, version: str | None) -> tuple[str, str]:
    """The catalog key ``name[@version]`` resolves to, and why where it is not the name asked (else empty): a family
    name (:data:`FAMILIES`), an engine known only at versions (its newest), or a version the catalog lacks (the
    nearest of the same engine's)."""
    tables = _tables()
    asked = f"{name}@{version}" if version else name
    if version is None:
        if name in tables:
            return name, ""
        if name in FAMILIES:
            return FAMILIES[name], f"engine {name} is taken as {_label(FAMILIES[name])} (the engine it trains on today)"
        versions = _versions(name)
        if versions:
            newest = versions[max(versions, key=lambda v: (_numbers(v), v))]
            return newest, f"engine {name} is taken as {_label(newest)} (its newest version in the catalog)"
    else:
        if asked in tables:
            return asked, ""
        versions = _versions(name)
        if versions.get(version) == name:
            return name, ""
        nearest = _nearest(version, versions)
        if nearest is not None:
            return nearest, (f"engine {asked} is not in the catalog: taken as {_label(nearest)}, the nearest known version "
                             f"(known: {', '.join(sorted(versions))})")
    known = ", ".join(engine_names())
    raise ConfigError(f"unknown engine {asked}{did_you_mean(asked, tables)} (known: {known})")


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
    """The engine ``spec`` names, e.g. ``torchtitan``, ``megatron-lm@2021`` or ``llm-foundry[mixed_precision=PURE]``;
    a family name or a version the catalog lacks resolves as :func:`_key` says, and the engine carries why."""
    match = _SPEC.match(spec.strip())
    if not match:
        raise ConfigError(f"engine {spec!r} must read name, name@version or name[key=value,...]")
    key, resolved = _key(match["name"], match["version"])
    engine = _build(key)
    if resolved:
        engine = replace(engine, resolved=resolved)
    for item in filter(None, (match["options"] or "").split(",")):
        if "=" not in item:
            raise ConfigError(f"engine option {item!r} must read key=value")
        name, value = (part.strip() for part in item.split("=", 1))
        engine = _apply(engine, key, name, value)
    return engine
