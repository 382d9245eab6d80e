"""Host CPUs as hardware: the per-core speed of a cluster's host processor relative to the CPU a host cost was
measured on.

A host cost in plait (a JPEG loader's seconds per sample, ``plait/hardware/data/loaders.toml``) is a measurement on
one machine's CPU core. Applied to another host, it scales by how fast that host's core does like work: the ratio
of the two CPUs' per-core scores in one public per-CPU benchmark (a work-rate benchmark's score is work per second,
so seconds per unit of work scale by its inverse),

    host seconds per sample = measured seconds per sample x score(measuring CPU) / score(host CPU).

The scores live in ``plait/hardware/data/host_cpus.toml``, each with its benchmark's name and source. Two scores of
different benchmarks are never divided, and a CPU without a score (or a cluster that names no CPU) leaves the ratio
at 1.0, said to be assumed: nothing is estimated from clocks or generations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from plait.errors import ConfigError
from plait.hardware.figure import Figure
from plait.packaged import packaged_toml
from plait.schema import build


@dataclass(frozen=True, kw_only=True)
class CoreScore:
    """A CPU's score in a public per-CPU benchmark, per core (work per second: higher is faster)."""

    value: float
    """The score per core, in the benchmark's unit."""
    benchmark: str
    """The benchmark and its metric (e.g. ``pts/tjbench decompression, Megapixels/s, one thread``)."""
    source: str
    """The page the figure is read from (URL)."""

    def __post_init__(self) -> None:
        if self.value <= 0 or not self.benchmark.strip() or not self.source.strip():
            raise ConfigError(f"core score {self.value}: needs a positive value, a benchmark and a source")


@dataclass(frozen=True, kw_only=True)
class HostCpu:
    """One host processor model."""

    slug: str
    """Its key in ``host_cpus.toml``."""
    name: str
    """The model, as its vendor names it."""
    source: str
    """Where the model (and the system that carries it) is stated."""
    per_core_score: CoreScore | None = None
    """Its per-core score in a public benchmark (``None``: none found)."""


def _table() -> dict[str, Any]:
    return packaged_toml("plait.hardware", "data", "host_cpus.toml")


def host_cpu_names() -> list[str]:
    """The packaged host CPUs' slugs."""
    return sorted(_table())


def get_host_cpu(slug: str) -> HostCpu:
    """The packaged host CPU ``slug`` (``host_cpus.toml``)."""
    raw = _table().get(slug)
    if raw is None:
        raise ConfigError(f"host CPU {slug!r} is not in host_cpus.toml ({', '.join(host_cpu_names())})")
    return build(HostCpu, {**raw, "slug": slug}, f"host_cpus.toml:{slug}")


def core_speed(host: HostCpu | None, measured_on: HostCpu | None) -> Figure:
    """How many times as fast a core of ``host`` does the work a figure measured on ``measured_on`` states: the ratio
    of their per-core scores in one benchmark (module docstring); 1.0, assumed, where either CPU or score is not
    known or the two scores are of different benchmarks."""
    if host is None or measured_on is None:
        return Figure(value=1.0, source="assumed: 1.0, the host CPU or the measuring CPU is not named")
    if host.slug == measured_on.slug:
        return Figure(value=1.0, source=f"the same CPU ({host.name})")
    ours, theirs = host.per_core_score, measured_on.per_core_score
    if ours is None or theirs is None or ours.benchmark != theirs.benchmark:
        missing = [c.slug for c in (host, measured_on) if c.per_core_score is None]
        why = (
            f"no public per-core score found for {', '.join(missing)}" if missing else "scores of different benchmarks"
        )
        return Figure(value=1.0, source=f"assumed: 1.0 ({host.slug} vs {measured_on.slug}): {why}")
    return Figure(
        value=ours.value / theirs.value,
        source=f"{ours.benchmark}: {host.slug} {ours.value:g} ({ours.source}) / {measured_on.slug} "
        f"{theirs.value:g} ({theirs.source})",
    )
