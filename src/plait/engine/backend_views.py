"""The back-ends' figures (``data/backends.toml``) and a cluster's tiers as one library sees them: what
:mod:`plait.engine.backends` loads only where a back-end other than the cluster's own is named (its module docstring
gives the model and the sources)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

from plait.errors import ConfigError, did_you_mean
from plait.hardware.cluster import COLLECTIVE_BACKENDS, Cluster, NetworkTier
from plait.hardware.figure import Curve, Figure
from plait.packaged import packaged_toml
from plait.schema import build


@dataclass(frozen=True, kw_only=True)
class TierView:
    """What one library makes of one tier class (module docstring)."""

    bandwidth: Curve
    """Fraction of the tier's NCCL bus bandwidth the library reaches, by buffer bytes."""
    latency_us: Figure | None = None
    """Per-step latency, microseconds (``None``: ``latency_factor`` times the tier's)."""
    latency_factor: Figure | None = None
    """Per-step latency as a multiple of the tier's NCCL figure (``None``: ``latency_us``)."""
    bus_cap_gb_per_s: Figure | None = None
    """Most bus bandwidth per GPU the library reaches on the tier whatever its links, GB/s, where the host sets the
    rate (a TCP stream copied by one core); ``None``: no cap beyond ``bandwidth``."""

    def __post_init__(self) -> None:
        if (self.latency_us is None) == (self.latency_factor is None):
            raise ConfigError("a back-end tier view takes exactly one of latency_us and latency_factor")

    def latency(self, tier_us: float) -> float:
        """Per-step latency on a tier whose NCCL figure is ``tier_us``, microseconds."""
        return self.latency_us.value if self.latency_us is not None else tier_us * self.latency_factor.value  # type: ignore[union-attr]


@dataclass(frozen=True, kw_only=True)
class BackendFacts:
    """One collective library."""

    title: str
    """Display name."""
    source: str
    """Where the library's description comes from."""
    nccl_protocols: bool = True
    """NCCL's low-latency protocol is the library's (NCCL only)."""
    scale_up: TierView | None = None
    """The cluster's first tier (``None``: the tier as NCCL measures it)."""
    scale_out: TierView | None = None
    """Every tier beyond the first (``None``: as NCCL measures it)."""


@functools.cache
def backend_facts(name: str) -> BackendFacts:
    """The packaged facts of back-end ``name`` (``data/backends.toml``)."""
    tables: dict[str, Any] = packaged_toml("plait.engine", "data", "backends.toml")
    if name not in tables or name not in COLLECTIVE_BACKENDS:
        raise ConfigError(
            f"back-end {name!r} must be one of {', '.join(COLLECTIVE_BACKENDS)}"
            f"{did_you_mean(name, COLLECTIVE_BACKENDS)}"
        )
    return build(BackendFacts, tables[name], f"backends.toml:{name}")


def seen_through(cluster: Cluster, name: str) -> Cluster:
    """``cluster``'s tiers as back-end ``name`` runs its collectives (an NCCL-described cluster only), built once per
    cluster and kept on it."""
    facts = backend_facts(name)
    if cluster.collective_backend != "nccl":
        raise ConfigError(
            f"--backend {name}: {cluster.name}'s tiers describe {cluster.collective_backend}, and "
            "back-end figures are relative to NCCL's; measure this machine with `plait calibrate "
            "--backends` instead"
        )
    found = cluster.link_cache.get(("backend", name))
    if found is None:
        tiers = tuple(
            _tier(tier, facts.scale_out if index else facts.scale_up) for index, tier in enumerate(cluster.tiers)
        )
        found = cluster.link_cache[("backend", name)] = replace(
            cluster, name=f"{cluster.name} [{name} collectives]", tiers=tiers, collective_backend=name
        )
    return found  # type: ignore[no-any-return]


def _tier(tier: NetworkTier, view: TierView | None) -> NetworkTier:
    """``tier`` with ``view``'s latency and its bandwidth fraction multiplied into each of the tier's curves."""
    if view is None:
        return tier
    cap = 1.5 if view.bus_cap_gb_per_s is None else view.bus_cap_gb_per_s.value / tier.bandwidth_gb_per_s_per_gpu
    scaled = {
        key: _product(curve, view.bandwidth, cap)
        for key in ("efficiency", "all_gather_efficiency", "reduce_scatter_efficiency")
        if (curve := getattr(tier, key)) is not None
    }
    return replace(tier, latency_us=view.latency(tier.latency_us), **scaled)


def _product(curve: Curve, fraction: Curve, cap: float) -> Curve:
    """The pointwise product of two curves, at most ``cap``, sampled at the union of their sizes."""
    sizes = sorted(set(curve.sizes) | set(fraction.sizes))
    return Curve(
        sizes=tuple(sizes),
        fractions=tuple(min(cap, curve.at(s) * fraction.at(s)) for s in sizes),
        source=f"{curve.source}; times {fraction.source}",
    )
