"""Mixed clusters: groups of different accelerators (or CPU nodes) joined by one fabric.

Each group is a homogeneous :class:`~plait.hardware.cluster.Cluster` (its accelerator, nodes, inner tiers and
price) of which the mixed cluster holds ``num_gpus``; ``join`` is the network tier that carries traffic between
groups. A collective over ranks of several groups runs at the slower end of each link it crosses — a ring
through an A100 node with 200 Gb/s HCAs moves at 200 Gb/s even where H100 nodes have 400 (Patarasuk and Yuan
2009: a ring's time is set by its slowest link) — so a preset's ``join`` tier carries the slower group's NIC
rate. The cost model never sees a mixed cluster directly: it costs each group on :func:`group_view`, a
homogeneous cluster of that group's accelerator whose outermost tier is the join (:mod:`plait.predict.mixed`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from plait.errors import ConfigError
from plait.hardware.cluster import Cluster, NetworkTier
from plait.hardware.figure import Figure


@dataclass(frozen=True, kw_only=True)
class DeviceGroup:
    """One kind of device in a mixed cluster."""

    name: str
    """Short name the plan refers to (``a100``, ``h100``, ``cpu``)."""
    cluster: Cluster
    """The group's own description: accelerator, nodes, inner tiers, price."""
    num_gpus: int
    """Devices of this kind the mixed cluster holds (whole nodes)."""

    def __post_init__(self) -> None:
        if self.num_gpus <= 0 or self.num_gpus % self.cluster.gpus_per_node:
            raise ConfigError(f"group {self.name}: num_gpus={self.num_gpus} must be a positive multiple of "
                              f"gpus_per_node={self.cluster.gpus_per_node} (whole nodes)")
        if self.num_gpus > self.cluster.max_gpus:
            raise ConfigError(f"group {self.name}: num_gpus={self.num_gpus} exceeds its fabric "
                              f"({self.cluster.max_gpus} GPUs)")

    @property
    def price_per_hour_usd(self) -> float:
        """Hourly price of the whole group."""
        return self.num_gpus * self.cluster.price_per_gpu_hour_usd


@dataclass(frozen=True, kw_only=True)
class MixedCluster:
    """Groups of different devices on one fabric."""

    name: str
    """Display name."""
    groups: tuple[DeviceGroup, ...]
    """The device groups, in rank order (a plan's ranks fill the first group's first)."""
    join: NetworkTier
    """The tier that joins the groups (its bandwidth: the slower group's NIC rate per GPU)."""
    source: str
    """Where the description comes from."""
    note: str = ""
    """Caveats."""

    def __post_init__(self) -> None:
        if not self.groups:
            raise ConfigError(f"{self.name}: needs at least one device group")
        names = [g.name for g in self.groups]
        if len(set(names)) != len(names):
            raise ConfigError(f"{self.name}: group names {names} must be distinct")
        if self.join.span_gpus < self.num_gpus:
            raise ConfigError(f"{self.name}: join tier span_gpus={self.join.span_gpus} must hold all "
                              f"{self.num_gpus} GPUs")
        if not self.source.strip():
            raise ConfigError(f"{self.name}: source must say where the description comes from")

    @property
    def num_gpus(self) -> int:
        """Devices of all groups."""
        return sum(g.num_gpus for g in self.groups)

    @property
    def max_gpus(self) -> int:
        """Alias of :attr:`num_gpus` (what a homogeneous cluster calls its size)."""
        return self.num_gpus

    @property
    def price_per_hour_usd(self) -> float:
        """Hourly price of every device."""
        return sum(g.price_per_hour_usd for g in self.groups)

    def group(self, name: str) -> DeviceGroup:
        """The group called ``name``."""
        for g in self.groups:
            if g.name == name:
                return g
        raise ConfigError(f"group {name!r} is not in {self.name} (groups: {', '.join(g.name for g in self.groups)})")


def group_view(cluster: MixedCluster, group: DeviceGroup, num_gpus: int) -> Cluster:
    """``group``'s cluster as one job of ``num_gpus`` ranks sees it when every rank were of that group's kind:
    the group's tiers that fit inside the group, clipped to it, then ``cluster.join`` for anything wider. A job
    within one group (``num_gpus <= group.num_gpus``) sees the group's own cluster unchanged."""
    if num_gpus <= group.num_gpus or len(cluster.groups) == 1:
        return group.cluster
    inner = []
    for tier in group.cluster.tiers:
        span = min(tier.span_gpus, group.num_gpus)
        if inner and inner[-1].span_gpus == span:
            continue
        inner.append(replace(tier, span_gpus=span))
    # every clipped span is at most the group's GPUs, below num_gpus: the join always follows
    return replace(group.cluster, name=f"{group.cluster.name} in {cluster.name}",
                   tiers=(*inner, replace(cluster.join, span_gpus=max(num_gpus, cluster.join.span_gpus))))


def slowed(cluster: Cluster, factor: float) -> Cluster:
    """``cluster`` with a device ``factor`` times slower at every computation: FLOP/s peaks and memory bandwidth
    divided by ``factor``, host overheads (per-layer dispatch, kernel launch, sampling) multiplied by it. What
    ``plait run --slowdown`` emulates by sleeping ``factor - 1`` times each pass's own time; network and memory
    capacity unchanged."""
    if not factor >= 1.0:
        raise ConfigError(f"slowdown factor={factor} must be >= 1")
    if factor == 1.0:
        return cluster
    acc = cluster.accelerator
    eff = acc.efficiency
    why = f"x{factor:g}: a device {factor:g} times slower (plait.hardware.mixed.slowed)"

    def longer(figure: Figure) -> Figure:
        return Figure(value=figure.value * factor, source=f"{figure.source} {why}")

    longer_fields = ("kernel_launch_us", "host_launch_us", "eager_dispatch_us", "host_sync_us", "host_layer_fwd_us", "host_layer_bwd_us",
                     "sampling_ns_per_slot", "matrix_sampling_ns_per_slot", "host_fsdp_layer_fwd_us",
                     "host_fsdp_layer_bwd_us", "host_tp_layer_fwd_us", "host_tp_layer_bwd_us")
    eff = replace(eff, **{name: longer(getattr(eff, name)) for name in longer_fields})
    acc = replace(acc, name=f"{acc.name} (x{factor:g} slower)", efficiency=eff,
                  peak_tflops={k: v / factor for k, v in acc.peak_tflops.items()},
                  memory_bandwidth_gb_per_s=acc.memory_bandwidth_gb_per_s / factor)
    return replace(cluster, name=f"{cluster.name} (x{factor:g} slower)", accelerator=acc)


def sliced(cluster: MixedCluster, num_gpus: int) -> MixedCluster:
    """``num_gpus`` devices of ``cluster``: each group its share in proportion to its size (largest remainder, at
    least one device each), from its first node; a group cut below one node keeps that node's part of it (its inner
    tiers clipped to the devices taken, the join beyond). The whole cluster for ``num_gpus = cluster.num_gpus``.
    What ``plait plan --cluster <mixed> --gpus N`` plans over and ``plait run`` of its plan file runs on."""
    groups = cluster.groups
    if num_gpus == cluster.num_gpus:
        return cluster
    if not len(groups) <= num_gpus < cluster.num_gpus:
        raise ConfigError(f"--gpus={num_gpus} must be at least one device per group ({len(groups)}) and at most "
                          f"{cluster.name}'s {cluster.num_gpus}")
    ideal = [num_gpus * g.num_gpus / cluster.num_gpus for g in groups]
    counts = [max(1, int(x)) for x in ideal]
    for i in sorted(range(len(groups)), key=lambda i: counts[i] - ideal[i]):
        if sum(counts) < num_gpus:
            counts[i] += 1
    while sum(counts) > num_gpus:  # the at-least-one floor took too many: trim the largest
        counts[counts.index(max(counts))] -= 1
    out = []
    for group, n in zip(groups, counts, strict=True):
        own = group.cluster
        if n % own.gpus_per_node:
            own = replace(own, gpus_per_node=min(own.gpus_per_node, n),
                          scale_up_domain_gpus=min(own.scale_up_domain_gpus, n))
        out.append(replace(group, cluster=own, num_gpus=n))
    return replace(cluster, name=f"{num_gpus} devices of {cluster.name}", groups=tuple(out))
