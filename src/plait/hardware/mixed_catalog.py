"""Mixed-cluster presets (``mixed_clusters.toml``) and files: groups of cluster presets or cluster files joined by
a network tier (:mod:`plait.hardware.mixed`). Read lazily, once, at the boundary (STYLE.md rule 4)."""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from plait.errors import ConfigError, parsing, read_user_file
from plait.hardware.catalog import resolve_cluster
from plait.hardware.cluster import Cluster, NetworkTier
from plait.hardware.mixed import DeviceGroup, MixedCluster
from plait.hardware.net_curves import net_of_latency
from plait.schema import build

_KEYS = {"name", "groups", "join", "source", "note"}
_GROUP_KEYS = {"name", "cluster", "num_gpus"}


@functools.cache
def _tables() -> dict[str, dict[str, Any]]:
    text = resources.files("plait.hardware").joinpath("data").joinpath("mixed_clusters.toml").read_text("utf-8")
    return tomllib.loads(text)


def mixed_cluster_names() -> list[str]:
    """Slugs of the packaged mixed clusters."""
    return sorted(_tables())


def mixed_from_mapping(raw: Mapping[str, Any], where: str, base: Path | None = None) -> MixedCluster:
    """A MixedCluster from a table: ``groups`` of ``{name, cluster, num_gpus}`` (``cluster``: a preset slug or a
    cluster file, relative to ``base``), a ``join`` tier table, ``source`` and an optional ``note``."""
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_KEYS))})")
    groups_raw = raw.get("groups")
    if not isinstance(groups_raw, list) or not groups_raw:
        raise ConfigError(f"{where}: groups must be a non-empty list of {{name, cluster, num_gpus}} tables")
    groups = tuple(_group(g, f"{where}.groups[{i}]", base) for i, g in enumerate(groups_raw))
    join = raw.get("join")
    if not isinstance(join, Mapping):
        raise ConfigError(f"{where}: join must be a network tier table (name, span_gpus, bandwidth_gb_per_s_per_gpu, "
                          "latency_us, efficiency, source)")
    join_tier = net_of_latency(build(NetworkTier, join, f"{where}.join"))
    return MixedCluster(name=str(raw.get("name", where)), groups=groups, join=join_tier,
                        source=str(raw.get("source", "")), note=str(raw.get("note", "")))


def _group(raw: Any, where: str, base: Path | None) -> DeviceGroup:
    if not isinstance(raw, Mapping) or set(raw) != _GROUP_KEYS:
        raise ConfigError(f"{where}: a group is a table of exactly {', '.join(sorted(_GROUP_KEYS))}")
    cluster, count = raw["cluster"], raw["num_gpus"]
    if not isinstance(cluster, str):
        raise ConfigError(f"{where}: cluster={cluster!r} must be a preset slug or a cluster file")
    if isinstance(count, bool) or not isinstance(count, int):
        raise ConfigError(f"{where}: num_gpus={count!r} must be an integer")
    if base is not None and Path(cluster).suffix in (".toml", ".yaml", ".yml"):
        cluster = str(base / cluster)
    return DeviceGroup(name=str(raw["name"]), cluster=resolve_cluster(cluster), num_gpus=count)


@functools.cache
def get_mixed_cluster(slug: str) -> MixedCluster:
    """The packaged mixed cluster ``slug``."""
    tables = _tables()
    if slug not in tables:
        raise ConfigError(f"unknown mixed cluster {slug!r} (known: {', '.join(sorted(tables))})")
    return mixed_from_mapping(tables[slug], f"mixed_clusters.toml:{slug}")


def mixed_file(path: Path) -> MixedCluster | None:
    """The mixed cluster a TOML file with ``groups`` describes; ``None`` for any other file (not built here)."""
    if path.suffix != ".toml" or not path.is_file():
        return None
    try:
        with parsing(path, "cluster file"):
            raw = tomllib.loads(read_user_file(path, "cluster file"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"cluster file {str(path)!r} is not valid TOML: {exc}") from exc
    return mixed_from_mapping(raw, str(path), path.parent) if "groups" in raw else None


def mixed_cluster(name: str | None) -> MixedCluster | None:
    """The mixed cluster ``name`` names (a mixed preset, or a TOML file with ``groups``), else ``None``."""
    if name is None:
        return None
    return get_mixed_cluster(name) if name in mixed_cluster_names() else mixed_file(Path(name))


def resolve_any_cluster(name_or_path: str) -> Cluster | MixedCluster:
    """A cluster preset, a mixed preset, or a file holding either (a file with ``groups`` is mixed)."""
    if name_or_path in _tables():
        return get_mixed_cluster(name_or_path)
    return mixed_file(Path(name_or_path)) or resolve_cluster(name_or_path)
