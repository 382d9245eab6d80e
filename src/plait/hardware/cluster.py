"""Clusters: nodes of accelerators joined by network tiers, innermost first.

A tier is a level of the network (NVLink domain, rail/leaf fabric, spine, data-centre
interconnect). ``span_gpus`` is the largest aligned block of consecutive ranks that
talk within the tier; a group whose ranks spread wider than one tier's span crosses
the next. Bandwidths are per GPU and per direction, as datasheets of NICs and links
give them; ``efficiency`` is the fraction of that line rate NCCL-style collectives
reach (nccl-tests "busbw"), with its provenance.
"""

# Annotations are evaluated here, not kept as strings (no `from __future__ import annotations`): dataclasses and
# plait.schema would otherwise parse and compile each field's type string when a process starts
# (tests/test_lazy_imports.py).

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from plait.errors import ConfigError
from plait.hardware.accelerator import Accelerator
from plait.hardware.figure import Curve
from plait.hardware.power_states import PowerStates
from plait.units import GB, GIB

CollectiveBackend = Literal["nccl", "mpi", "gloo", "grpc"]
"""Collective libraries plait prices (:mod:`plait.engine.backends`)."""
COLLECTIVE_BACKENDS: tuple[str, ...] = get_args(CollectiveBackend)
"""The names of :data:`CollectiveBackend`."""


@dataclass(frozen=True, kw_only=True)
class InNetworkAggregation:
    """Switches of a tier that sum what the ranks below them send (SwitchML, Sapio et al., NSDI 2021; NVIDIA
    SHARP): each rank sends its vector once and receives the sum once, in fixed-size slots of the switch's memory."""

    slots: int
    """Aggregation slots the switch gives one job's stream (SwitchML's pool size ``s``)."""
    slot_bytes: int
    """Payload bytes one slot sums (one packet: SwitchML's ``k`` elements)."""
    round_trip_us: float
    """Time from a slot's packet leaving a rank to its sum coming back, microseconds."""
    payload_fraction: float
    """Payload bytes over bytes on the wire (headers)."""
    source: str
    """Where these figures come from."""

    def __post_init__(self) -> None:
        if self.slots <= 0 or self.slot_bytes <= 0 or self.round_trip_us <= 0 or not 0 < self.payload_fraction <= 1:
            raise ConfigError(f"aggregation: slots, slot_bytes, round_trip_us must be > 0 and payload_fraction in "
                              f"(0, 1], got {self.slots}, {self.slot_bytes}, {self.round_trip_us}, "
                              f"{self.payload_fraction}")
        if not self.source.strip():
            raise ConfigError("aggregation: source must say where the figures come from")

    @property
    def window_bytes_per_s(self) -> float:
        """Payload a rank can keep in flight per second: ``slots x slot_bytes`` per round trip (SwitchML Sec. 3.4:
        the pool must cover the bandwidth-delay product to reach line rate)."""
        return self.slots * self.slot_bytes / (self.round_trip_us * 1e-6)


@dataclass(frozen=True, kw_only=True)
class NetworkTier:
    """One level of the network."""

    name: str
    """Display name (``nvlink``, ``infiniband-ndr``, ``roce``, ``dci``...)."""
    span_gpus: int
    """Largest aligned block of consecutive ranks reachable within this tier."""
    bandwidth_gb_per_s_per_gpu: float
    """Line rate per GPU per direction, GB/s."""
    latency_us: float
    """Small-message latency of one collective step (one hop), microseconds."""
    efficiency: Curve
    """Fraction of the line rate collectives sustain (nccl-tests busbw / line rate), by message bytes."""
    source: str
    """Where bandwidth, span and latency come from."""
    all_gather_efficiency: Curve | None = None
    """All-gather busbw fraction where the backend's all-gather differs from its all-reduce (``None``: ``efficiency``)."""
    reduce_scatter_efficiency: Curve | None = None
    """Reduce-scatter busbw fraction where it differs from the all-reduce (gloo's, measured by ``plait calibrate``)."""
    wide_area: bool = False
    """A link between sites (regions, data centres): each aligned block of the tier below is one site, and every
    byte a group sends through this tier leaves its site. ``bandwidth_gb_per_s_per_gpu`` is then the
    site's share of the link per GPU: the link's rate over the GPUs of one site."""
    egress_usd_per_gb: float = 0.0
    """Price of one GB (1e9 bytes) leaving a site through this tier (cloud inter-region transfer; 0 for a leased
    line paid by the hour)."""
    egress_source: str = ""
    """Where the egress price comes from."""
    aggregation: InNetworkAggregation | None = None
    """The tier's switches sum in the network (``None``: they only forward)."""
    curve_ranks: int = 0
    """Ranks of the nccl-tests run the sized curves were read from, whose busbw is bus bytes over the whole time,
    latency included: the loader nets the latency steps out (:mod:`plait.hardware.net_curves`) and sets this to 0.
    0: the curves are already net of latency (``plait calibrate`` writes them so) or one constant plateau."""

    def __post_init__(self) -> None:
        if self.aggregation is not None and self.wide_area:
            raise ConfigError(f"tier {self.name}: aggregation needs switches of one site, not a wide-area link")
        if self.span_gpus <= 0 or self.bandwidth_gb_per_s_per_gpu <= 0 or self.latency_us < 0:
            raise ConfigError(f"tier {self.name}: span_gpus, bandwidth must be > 0 and latency >= 0")
        if self.curve_ranks < 0 or self.curve_ranks == 1:
            raise ConfigError(f"tier {self.name}: curve_ranks={self.curve_ranks} must be 0 (curves net of latency) "
                              "or the ranks (>= 2) of the nccl-tests run the curves were read from")
        if self.egress_usd_per_gb < 0:
            raise ConfigError(f"tier {self.name}: egress_usd_per_gb={self.egress_usd_per_gb} must be >= 0")
        if self.egress_usd_per_gb > 0 and not self.wide_area:
            raise ConfigError(f"tier {self.name}: egress_usd_per_gb={self.egress_usd_per_gb} needs wide_area = true")

    @property
    def line_bytes_per_s(self) -> float:
        """Per-GPU line rate of this tier in bytes/s."""
        return self.bandwidth_gb_per_s_per_gpu * GB

    def curve(self, kind: str = "all_reduce") -> Curve:
        """Busbw fraction of collective ``kind`` (``all_gather``, ``reduce_scatter``; anything else: ``efficiency``)."""
        own = (self.all_gather_efficiency if kind == "all_gather"
               else self.reduce_scatter_efficiency if kind == "reduce_scatter" else None)
        return own if own is not None else self.efficiency

    def bandwidth_bytes_per_s(self, message_bytes: float, kind: str = "all_reduce") -> float:
        """Achievable per-GPU bandwidth for collective ``kind`` on a ``message_bytes`` buffer."""
        return self.line_bytes_per_s * self.curve(kind).at(message_bytes)

    @property
    def latency_s(self) -> float:
        """Per-hop latency in seconds."""
        return self.latency_us * 1e-6


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """A homogeneous GPU cluster."""

    name: str
    """Display name."""
    accelerator: Accelerator
    """The GPU every node carries."""
    gpus_per_node: int
    """GPUs per server (one OS image, one host memory)."""
    scale_up_domain_gpus: int
    """GPUs in one NVLink/xGMI domain (8 for DGX/HGX, 72 for NVL72)."""
    tiers: tuple[NetworkTier, ...]
    """Network tiers, innermost (scale-up) first."""
    price_per_gpu_hour_usd: float
    """Price of one GPU-hour, USD."""
    price_source: str
    """Where the price comes from."""
    host_memory_gib_per_gpu: float
    """Host DRAM per GPU, GiB (for offload)."""
    host_memory_bandwidth_gb_per_s_per_gpu: float
    """Host DRAM bandwidth per GPU's share of its node, GB/s (a CPU optimizer step streams through it)."""
    host_memory_bandwidth_source: str
    """Where the host bandwidth comes from."""
    source: str
    """Where the system description comes from."""
    note: str = ""
    """Caveats."""
    power_limit_w: float | None = None
    """Board power the operator holds each GPU to, W (``None``: the accelerator's TDP). The catalog
    scales ``accelerator``'s FLOP/s peaks to it (:mod:`plait.hardware.power`)."""
    power_limit_source: str = ""
    """Where the power limit comes from."""
    storage_bandwidth_gb_per_s_per_gpu: float | None = None
    """Sustained write (and read) bandwidth of the checkpoint store per GPU, GB/s: the file system's aggregate
    over the GPUs it serves (``None``: plait's default in ``reliability.toml``)."""
    storage_source: str = ""
    """Where the storage bandwidth comes from."""
    host_cores_per_node: int = 0
    """Physical host CPU cores per node (0: not stated); a host-CPU sampler's or loader's workers share them."""
    host_cores_source: str = ""
    """Where the core count comes from."""
    host_cpu: str = ""
    """The host processor model, a slug of ``plait/hardware/data/host_cpus.toml`` ("": not stated); a host cost
    measured on another CPU scales by their per-core speeds (:mod:`plait.hardware.host_cpu`)."""
    power: PowerStates | None = None
    """Watts per GPU by device state, host, network and PUE (``None``: unknown, no energy is predicted); the
    catalog derives it from the accelerator's rated power where a cluster file gives none
    (:func:`plait.hardware.power_states.default_power`)."""
    collective_backend: CollectiveBackend = "nccl"
    """The collective library the tiers' figures describe and the job's collectives run on (``nccl``: nccl-tests
    figures, NCCL's LL protocol for small buffers); another back-end's view of an NCCL-measured cluster is derived by
    :func:`plait.engine.backends.with_backend`. On a cluster that names another library (``plait calibrate`` on a
    CPU writes ``gloo``) the tiers are that library's measured figures and take precedence: its collectives cost the
    tiers' alpha-beta as is, with no LL protocol and no ``backends.toml`` figures applied on top."""
    extra: dict[str, str] = field(default_factory=dict)
    """Other provenance text no computation reads."""
    link_cache: dict[tuple[Any, ...], Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    """Network views of process groups by (size, stride), derived from the tiers alone and kept on first use
    (:func:`plait.cost.collectives.group_link`), and other back-ends' views of this cluster by ``("backend", name)``
    (:func:`plait.engine.backends.with_backend`), and single-plan collective times under ``"times"``
    (:func:`plait.cost.links.collective_s`); not part of the description."""

    @property
    def host_cores_per_gpu(self) -> float | None:
        """Physical host CPU cores per GPU: the node's cores over its GPUs (``None``: not stated; an input pipeline
        that decodes on the host needs it, :mod:`plait.cost.input_pipeline`)."""
        return self.host_cores_per_node / self.gpus_per_node if self.host_cores_per_node else None

    def __post_init__(self) -> None:
        if self.gpus_per_node <= 0 or self.scale_up_domain_gpus <= 0:
            raise ConfigError(f"{self.name}: gpus_per_node and scale_up_domain_gpus must be > 0")
        if not self.tiers:
            raise ConfigError(f"{self.name}: needs at least one network tier")
        spans = [t.span_gpus for t in self.tiers]
        if spans != sorted(spans):
            raise ConfigError(f"{self.name}: tiers must be ordered innermost first (span_gpus {spans})")
        if self.tiers[0].wide_area:
            raise ConfigError(f"{self.name}: tier {self.tiers[0].name} joins sites (wide_area) but is innermost; "
                              "a site needs a tier of its own inside it")
        if self.host_cores_per_node < 0 or (self.host_cores_per_node and not self.host_cores_source):
            raise ConfigError(f"{self.name}: host_cores_per_node={self.host_cores_per_node} must be >= 0 and carry a "
                              "host_cores_source")
        if self.price_per_gpu_hour_usd < 0:
            raise ConfigError(f"{self.name}: price_per_gpu_hour_usd={self.price_per_gpu_hour_usd} must be >= 0")

    @property
    def storage_bytes_per_s_per_gpu(self) -> float | None:
        """Checkpoint-store bandwidth per GPU in bytes/s (``None``: not stated)."""
        gb = self.storage_bandwidth_gb_per_s_per_gpu
        return None if gb is None else gb * GB

    @property
    def host_memory_bytes_per_gpu(self) -> float:
        """Host DRAM per GPU in bytes."""
        return self.host_memory_gib_per_gpu * GIB

    @property
    def host_memory_bytes_per_s_per_gpu(self) -> float:
        """Host DRAM bandwidth per GPU's share of its node in bytes/s."""
        return self.host_memory_bandwidth_gb_per_s_per_gpu * GB

    @property
    def site_gpus(self) -> int | None:
        """GPUs of one site: the span of the tier inside the first wide-area tier (``None``: one site)."""
        for index, tier in enumerate(self.tiers):
            if tier.wide_area:
                return self.tiers[index - 1].span_gpus
        return None

    @property
    def wide_area_tier(self) -> NetworkTier | None:
        """The first tier that joins sites (``None``: one site)."""
        return next((t for t in self.tiers if t.wide_area), None)

    @property
    def max_gpus(self) -> int:
        """GPUs reachable through the outermost tier."""
        return self.tiers[-1].span_gpus

    def tier_index(self, extent_gpus: int) -> int:
        """Innermost tier whose span holds an aligned block of ``extent_gpus`` consecutive ranks."""
        for index, tier in enumerate(self.tiers):
            if extent_gpus <= tier.span_gpus:
                return index
        raise ConfigError(f"a group spanning {extent_gpus} GPUs exceeds cluster {self.name} ({self.max_gpus} GPUs)")
