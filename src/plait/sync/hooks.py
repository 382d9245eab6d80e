"""What a synchronization method asks of the layers above it: the cost model's prices and the runtime's pieces.

``plait.sync`` sits below ``plait.plan``, ``plait.cost`` and ``plait.run`` (docs/architecture.md), so a method
cannot call them; it is handed an object that offers what it needs, declared here as a ``Protocol`` and
implemented above (dependency inversion). Each method then answers for itself, in its own family's module:

- :class:`Tally`: the bytes it hands to collectives or sends in one step (:meth:`SyncMethod.sent_bytes
  <plait.sync.base.SyncMethod.sent_bytes>`; implemented by :mod:`plait.cost.sync`);
- :class:`Pricing`: its seconds and memory per step (:meth:`SyncMethod.step_costs
  <plait.sync.base.SyncMethod.step_costs>`; implemented by :mod:`plait.cost.sync`). A family whose formula
  needs the cost layer's own machinery (the parameter servers' and the switch's phases, gossip's topologies, the
  asynchronous methods' closed network) calls the hook named for it, which runs that machinery
  (:mod:`plait.cost.servers`, :mod:`plait.cost.gossip`, :mod:`plait.cost.async_sgd`);
- :class:`GradientHooks`, :class:`OptimizerHooks`, :class:`WorkerHooks`: its runtime pieces — the DDP
  communication hook (:mod:`plait.run.replica_grads`), the optimizer wrapper (:mod:`plait.run.sync`), an
  asynchronous worker's exchange (:mod:`plait.run.async_train`).

Why a method picks its hook (double dispatch) rather than a table keyed by class in each layer: the method's module
is where one reads what the method does and which hook it takes; each hook is typed with the method's own class, so
it reads that class's fields without a cast; a protocol lists in one place every hook an implementation must offer
(a structural type checker holds each implementation to it); and a subclass inherits its parent's answers (bf16 and
fp16 are one :class:`~plait.sync.half.HalfPrecision`), which a table looked up by exact class would not. Adding a
family: its module, and a hook in each protocol whose machinery it needs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

if TYPE_CHECKING:
    from plait.sync.allreduce import PipeSGD
    from plait.sync.asynchronous import Asynchronous
    from plait.sync.base import SyncMethod
    from plait.sync.crossbow import Crossbow
    from plait.sync.gossip import Gossip
    from plait.sync.half import HalfPrecision
    from plait.sync.periodic import PALSGD, DiLoCo, DreamDDP, LocalSGD
    from plait.sync.powersgd import PowerSGD
    from plait.sync.servers import ParamServer, SwitchAggregation
    from plait.sync.site_quantize import SiteQuantize
    from plait.sync.site_topk import SiteTopK
    from plait.sync.sparse import Quantize, TopK
    from plait.workload.tensors import Shape

Costs = tuple[Any, Any, Any]
"""(seconds that overlap the backward pass like DDP's buckets, seconds on the critical path, extra bytes of memory
per GPU), per row: numpy columns over a batch of plans, or floats for one plan."""
T_co = TypeVar("T_co", covariant=True)
R = TypeVar("R")
"""What a runtime hook gives back (a DDP hook and its state, an optimizer)."""


class Tally(Protocol):
    """One replica's step, as a method's byte count asks about it (:func:`plait.cost.sync.payload_bytes`)."""

    @property
    def shapes(self) -> list[Shape]:
        """The rank's gradient (parameter) shapes."""
        ...

    @property
    def step(self) -> int | None:
        """The step, counted from 0 (``None``: the steady-state mean over a period)."""
        ...

    def scheduled_elements(self, every: int) -> int:
        """Parameter elements :mod:`plait.plan.partial` schedules at :attr:`step` in a period of ``every``."""
        ...

    def server_bytes(self, method: ParamServer) -> float:
        """A parameter server replica's sends (:func:`plait.cost.servers.server_sent_bytes`)."""
        ...

    def switch_bytes(self, method: SwitchAggregation) -> float:
        """An in-network aggregation replica's sends (:func:`plait.cost.servers.switch_sent_bytes`)."""
        ...

    def gossip_bytes(self, method: Gossip) -> float:
        """A gossip replica's copies to its neighbours (:func:`plait.cost.gossip.sent_bytes`)."""
        ...

    def worker_bytes(self, method: Asynchronous) -> float:
        """An asynchronous worker's pushes to its servers (:func:`plait.cost.async_sgd.worker_bytes`)."""
        ...


class Crossing(Protocol):
    """Bytes that cross site boundaries in one step of a point-to-point method, per stage's replica groups
    (:func:`plait.cost.egress.egress_bytes_per_step`)."""

    def gossip_bytes(self, method: Gossip) -> float: ...
    def server_bytes(self, method: ParamServer) -> float: ...
    def worker_bytes(self, method: Asynchronous) -> float: ...


class Pricing(Protocol):
    """The rows of plans a method is priced on and the cost layer's prices (:class:`plait.cost.sync.Prices`).
    Values are numpy columns over the rows, or floats for one plan (:attr:`xp` knows which)."""

    @property
    def xp(self) -> Any:
        """The columns' operations (:mod:`plait.plan.ops`): ``where``, ``minimum``, ``maximum``."""
        ...

    @property
    def replicas(self) -> Any:
        """Data-parallel replicas per row."""
        ...

    @property
    def stride(self) -> Any:
        """Ranks between two replicas of a gradient-reducing group (``tp``)."""
        ...

    @property
    def split(self) -> Any:
        """Rows whose replicas are split by TP or PP, which DDP does not take (:mod:`plait.run.replica_grads`)."""
        ...

    @property
    def memory_bytes_per_s(self) -> float:
        """The accelerator's sustained memory bandwidth (streaming passes)."""
        ...

    @property
    def fp32_flops_per_s(self) -> float:
        """The accelerator's fp32 peak (GEMMs of compression, optimistic)."""
        ...

    @property
    def held_bytes(self) -> Any:
        """fp32 bytes of the parameters one rank holds (what a parameter-averaging method averages)."""
        ...

    def full(self, value: Any) -> Any:
        """``value`` on every row."""
        ...

    def all_reduce_s(self, group: Any, stride: Any, payload_bytes: Any) -> Any:
        """Seconds of an all-reduce of ``payload_bytes`` per rank over ``group`` ranks ``stride`` apart."""
        ...

    def all_gather_s(self, group: Any, stride: Any, payload_bytes: Any) -> Any:
        """Seconds of an all-gather of ``payload_bytes`` (the gathered whole) over ``group`` ranks ``stride`` apart."""
        ...

    def behind_next_step_s(self, reduce_s: Any, payload_bytes: float) -> Any:
        """Exposed seconds of an all-reduce run behind the next step's compute (:mod:`plait.cost.overlap`)."""
        ...

    @property
    def optimizer_step_s(self) -> Any:
        """Seconds of one replica's optimizer step on one rank (:func:`plait.cost.dataparallel.optimizer_step_s`)."""
        ...

    @property
    def replica_state_bytes(self) -> Any:
        """Bytes of one replica's weights, fp32 gradients and optimizer state on one rank (unsharded)."""
        ...

    def averaging_group(self) -> tuple[Any, Any, Any]:
        """(replicas, ranks between them, bytes each averages) of a parameter average over whole replicas (with
        sharding, HSDP's ``dp_replicate`` groups, each averaging its shard)."""
        ...

    def per_rank_tensors(self, costs: Callable[[list[Shape]], Costs]) -> Costs:
        """``costs`` of the gradient tensors one rank of the priced stage holds, per row."""
        ...

    def site_costs(self, method: SiteTopK | SiteQuantize) -> Costs:
        """The costs of per-tier compression across sites (:func:`plait.cost.site_sync.site_costs`)."""
        ...

    def server_costs(self, method: ParamServer) -> Costs:
        """The costs of parameter servers (:func:`plait.cost.servers.server_costs`)."""
        ...

    def switch_costs(self, method: SwitchAggregation) -> Costs:
        """The costs of in-network aggregation (:func:`plait.cost.servers.switch_costs`)."""
        ...

    def gossip_costs(self, method: Gossip) -> Costs:
        """The costs of gossip averaging (:func:`plait.cost.gossip.gossip_costs`)."""
        ...

    def async_costs(self, method: Asynchronous) -> Costs:
        """The costs of an asynchronous method through server ranks (:func:`plait.cost.async_sgd.async_costs`)."""
        ...

    def unmodelled(self, method: SyncMethod) -> NoReturn:
        """Refuse a method the cost model does not price."""
        ...


class GradientHooks(Protocol[T_co]):
    """DDP communication hooks of the gradient-compressing methods (:func:`plait.run.replica_grads.comm_hook`)."""

    def half(self, method: HalfPrecision) -> T_co: ...
    def topk(self, method: TopK) -> T_co: ...
    def quantize(self, method: Quantize) -> T_co: ...
    def site_topk(self, method: SiteTopK) -> T_co: ...
    def site_quantize(self, method: SiteQuantize) -> T_co: ...
    def powersgd(self, method: PowerSGD) -> T_co: ...
    def uncompressed(self, method: SyncMethod) -> NoReturn: ...


class OptimizerHooks(Protocol[T_co]):
    """The optimizer each method steps with (:func:`plait.run.sync.wrap_optimizer`)."""

    def plain(self, method: SyncMethod) -> T_co: ...
    def param_server(self, method: ParamServer) -> T_co: ...
    def switch_aggregation(self, method: SwitchAggregation) -> T_co: ...
    def gossip(self, method: Gossip) -> T_co: ...
    def dreamddp(self, method: DreamDDP) -> T_co: ...
    def diloco(self, method: DiLoCo) -> T_co: ...
    def palsgd(self, method: PALSGD) -> T_co: ...
    def pipe_sgd(self, method: PipeSGD) -> T_co: ...
    def local_sgd(self, method: LocalSGD) -> T_co: ...
    def crossbow(self, method: Crossbow) -> T_co: ...


class WorkerHooks(Protocol):
    """What a worker of :mod:`plait.run.async_train` does after its backward pass."""

    def reduce_and_step(self) -> None:
        """Reduce the gradients as the method's synchronous runtime does, and step the optimizer."""
        ...

    def push_gradient(self) -> None:
        """Push the gradient's pieces to the servers, which step; take back their parameters."""
        ...

    def push_sum(self) -> None:
        """Push the gradient's pieces to the servers, pull their mean, step here."""
        ...

    def push_parameters(self) -> None:
        """Push the parameters' pieces to the centre, move by the elastic difference it returns."""
        ...
