"""Load accelerators and cluster presets from the packaged data files or a user file.

Files are read lazily, once, at the boundary (STYLE.md rule 4); nothing past here
sees a raw dict. ``accelerators.toml`` holds datasheet facts, ``efficiency.toml`` the
achievable fractions (each value with its source), ``clusters.toml`` the presets.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from plait.errors import ConfigError, all_problems, did_you_mean, parsing, read_user_file
from plait.hardware.accelerator import Accelerator, with_eager_dispatch
from plait.hardware.cluster import Cluster
from plait.hardware.figure import Curve
from plait.hardware.net_curves import net_of_latency
from plait.hardware.power import power_capped
from plait.hardware.power_states import default_power
from plait.packaged import packaged_toml
from plait.schema import build

DEFAULT_CLUSTER = "dgx-h100-ib"
"""The cluster a command prices for when none is named."""


def _data(name: str) -> dict[str, Any]:
    return packaged_toml("plait.hardware", "data", name)


@functools.cache
def _accelerator_tables() -> dict[str, dict[str, Any]]:
    return _data("accelerators.toml")


@functools.cache
def _efficiency_tables() -> dict[str, dict[str, Any]]:
    return _data("efficiency.toml")


@functools.cache
def _cluster_tables() -> dict[str, dict[str, Any]]:
    return _data("clusters.toml")


@functools.cache
def kernel_curve(name: str) -> Curve:
    """A kernel-relative rate curve of ``kernels.toml`` (e.g. ``flash1_relative``), with its source."""
    tables = _data("kernels.toml")
    if name not in tables:
        raise ConfigError(f"unknown kernel curve {name!r} (known: {', '.join(sorted(tables))})")
    return build(Curve, tables[name], f"kernels.toml:{name}")


def loader_table() -> dict[str, Any]:
    """The input-pipeline figures of ``loaders.toml`` (read by :mod:`plait.cost.input_pipeline`)."""
    return _data("loaders.toml")


def reliability_table() -> dict[str, Any]:
    """The failure, storage and restart figures of ``reliability.toml`` (read by :mod:`plait.predict.goodput`)."""
    return _data("reliability.toml")


def accelerator_names() -> list[str]:
    """Slugs of the packaged accelerators."""
    return sorted(_accelerator_tables())


def cluster_names() -> list[str]:
    """Slugs of the packaged cluster presets."""
    return sorted(_cluster_tables())


def accelerator_from_mapping(raw: Mapping[str, Any], where: str, efficiency: Mapping[str, Any] | None = None) -> Accelerator:
    """Build an Accelerator; its efficiency comes from ``raw['efficiency']`` or ``efficiency``."""
    fields = dict(raw)
    eff_raw = fields.pop("efficiency", None) or efficiency
    if eff_raw is None:
        raise ConfigError(f"{where}: missing required table 'efficiency' (achievable fractions with sources)")
    fields["efficiency"] = eff_raw
    return build(Accelerator, fields, where)


@functools.cache
def get_accelerator(slug: str) -> Accelerator:
    """The packaged accelerator ``slug``."""
    tables = _accelerator_tables()
    if slug not in tables:
        raise ConfigError(f"unknown accelerator {slug!r}{did_you_mean(slug, tables)} (known: "
                          f"{', '.join(sorted(tables))})")
    eff = _efficiency_tables().get(slug)
    return accelerator_from_mapping(tables[slug], f"accelerators.toml:{slug}", eff and with_eager_dispatch(eff))


def cluster_from_mapping(raw: Mapping[str, Any], where: str) -> Cluster:
    """Build a Cluster; ``accelerator`` is a packaged slug or an inline table."""
    fields = dict(raw)
    acc = fields.get("accelerator")
    problems: list[str | ConfigError] = []
    try:
        if isinstance(acc, str):
            fields["accelerator"] = get_accelerator(acc)
        elif isinstance(acc, Mapping):
            fields["accelerator"] = accelerator_from_mapping(acc, f"{where}.accelerator")
        else:
            raise ConfigError(f"{where}: accelerator must be a known slug or a table, got {acc!r}")
    except ConfigError as exc:  # report it with the cluster's own problems: check those against a stand-in
        problems.append(exc)
        fields["accelerator"] = get_accelerator("h100-sxm-80gb")
    limit = fields.get("power_limit_w")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, (int, float)):
            problems.append(f"{where}: power_limit_w={limit!r} must be a number of watts")
            del fields["power_limit_w"]
        else:
            fields["power_limit_w"] = float(limit)
            fields.setdefault("power_limit_source", "stated in the cluster description")
    try:
        cluster = build(Cluster, fields, where)
    except ConfigError as exc:
        problems.append(exc)
    if problems:
        raise all_problems(problems)
    if any(tier.curve_ranks for tier in cluster.tiers):  # nccl-tests curves hold the latency the cost model adds
        cluster = replace(cluster, tiers=tuple(net_of_latency(tier) for tier in cluster.tiers))
    rated_w = cluster.accelerator.tdp_w  # the datasheet's, before the power limit replaces it
    if cluster.power_limit_w is not None:
        cluster = with_accelerator(cluster, cluster.accelerator)
    return cluster if cluster.power is not None else replace(cluster, power=default_power(rated_w, cluster.power_limit_w))


def with_accelerator(cluster: Cluster, accelerator: Accelerator) -> Cluster:
    """``cluster`` carrying ``accelerator`` (its datasheet description), held to the cluster's power limit."""
    if cluster.power_limit_w is not None:
        accelerator = power_capped(accelerator, cluster.power_limit_w, cluster.power_limit_source)
    return cluster if accelerator == cluster.accelerator else replace(cluster, accelerator=accelerator)


@functools.cache
def get_cluster(slug: str) -> Cluster:
    """The packaged cluster preset ``slug``."""
    tables = _cluster_tables()
    if slug not in tables:
        raise ConfigError(f"unknown cluster {slug!r}{did_you_mean(slug, tables)} (known: {', '.join(sorted(tables))}; "
                          "mixed presets: plait clusters; or give a .toml/.yaml file)")
    return cluster_from_mapping(tables[slug], f"clusters.toml:{slug}")


def load_cluster_file(path: Path) -> Cluster:
    """A user cluster from a TOML or YAML file holding one cluster table."""
    if path.suffix not in (".toml", ".yaml", ".yml"):
        raise ConfigError(f"cluster file {str(path)!r} must end in .toml, .yaml or .yml")
    text = read_user_file(path, "cluster file")
    if path.suffix == ".toml":
        import tomllib  # a user's file only: the packaged catalogs are read through plait.packaged

        try:
            with parsing(path, "cluster file"):
                raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"cluster file {str(path)!r} is not valid TOML: {exc}") from exc
    else:
        import yaml

        try:
            with parsing(path, "cluster file"):
                # libyaml's loader where PyYAML has it: the pure-Python scanner takes seconds on a few thousand
                # nested brackets (it rescans every open flow level per token); libyaml stops at depth 1,000
                raw = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except yaml.YAMLError as exc:
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            raise ConfigError(f"cluster file {str(path)!r} is not valid YAML: {'; '.join(lines[:2])}") from exc
    if not isinstance(raw, Mapping):
        raise ConfigError(f"cluster file {str(path)!r} must hold one table of cluster fields")
    return cluster_from_mapping(raw, str(path))


def resolve_cluster(name_or_path: str) -> Cluster:
    """A preset slug, or a path to a TOML/YAML cluster file."""
    if name_or_path in _cluster_tables():
        return get_cluster(name_or_path)
    path = Path(name_or_path)
    if path.suffix in (".toml", ".yaml", ".yml"):
        return load_cluster_file(path)
    return get_cluster(name_or_path)
