"""What every synchronization method answers, and how its parameters are declared, parsed and written.

A method is a frozen ``kw_only`` dataclass whose fields are its parameters, in canonical order (the order its spec
``METHOD:key=value,...`` writes them, so that equal methods compare equal and print the same text). Each field
declares how text enters it through :func:`number` (bounds, whole or not) or :func:`choice` (named values); the
one parser, :func:`plait.sync.registry.parse`, reads those declarations.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from plait.errors import ConfigError

if TYPE_CHECKING:
    from plait.sync.gossip import Topology
    from plait.sync.hooks import Costs, Crossing, GradientHooks, OptimizerHooks, Pricing, R, Tally, WorkerHooks
    from plait.workload.tensors import Shape

GRAD_BYTES = 4
"""fp32 gradients and parameters (the replica's own copy; autocast computes in bf16)."""
FP32_PASS_BYTES = 4
"""Bytes one streaming pass over an fp32 tensor moves per element."""


@dataclass(frozen=True)
class Number:
    """How a numeric parameter is read: its inclusive bounds and whether it must be a whole number."""

    low: float
    """Least value accepted."""
    high: float
    """Largest value accepted."""
    integer: bool
    """Whether the value must be a whole number (stored as ``int``, written without a decimal point)."""


@dataclass(frozen=True)
class Choice:
    """How a named parameter is read: the names it takes, written as themselves."""

    names: tuple[str, ...]
    """The names accepted, in the order the error message lists them."""
    values: tuple[Any, ...]
    """The value stored for each name (the name itself, or ``False``/``True`` for a yes/no choice)."""


def number(default: float | None, low: float, high: float, integer: bool) -> Any:
    """A numeric parameter field (``default`` ``None``: required)."""
    meta = {"read": Number(low, high, integer)}
    return field(metadata=meta) if default is None else field(default=default, metadata=meta)


def choice(default: Any, names: tuple[str, ...], values: tuple[Any, ...] | None = None) -> Any:
    """A named parameter field taking one of ``names`` (stored as ``values``' entry; default: the name)."""
    return field(default=default, metadata={"read": Choice(names, values if values is not None else names)})


@dataclass(frozen=True, kw_only=True)
class SyncMethod:
    """A parsed synchronization method of data-parallel replicas; subclasses add their parameters as fields."""

    name: ClassVar[str]
    """The method's name in a spec (``METHOD[:key=value,...]``)."""
    FILES_HOLD_TEXT: ClassVar[bool] = True
    """Files state a method as its spec text, which :class:`plait.plan.Plan` parses (:mod:`plait.schema`)."""
    compressed: ClassVar[bool] = False
    """Compresses each step's gradients (in DDP's buckets: unsharded replicas only)."""
    infrequent: ClassVar[bool] = False
    """Trains replicas apart and averages parameters every few steps (over whole replicas: with sharding, over
    HSDP's ``dp_replicate`` groups, each replica sharded within itself)."""
    asynchronous: ClassVar[bool] = False
    """Workers do not wait for each other, through dedicated server ranks (:mod:`plait.run.async_train`)."""
    aggregating: ClassVar[bool] = False
    """Sums every replica's whole gradient each step somewhere other than in an all-reduce."""
    point_to_point: ClassVar[bool] = False
    """Moves its bytes in point-to-point sends between pairs of ranks, not in collectives."""
    collective: ClassVar[Literal["all_reduce", "all_gather"]] = "all_reduce"
    """The collective its payload goes to: all-reduced, or all-gathered (each rank hands over its own pieces)."""
    pipelined: ClassVar[bool] = False
    """Runs each step's reduction behind the next step's compute (Pipe-SGD)."""
    pseudo_steps: ClassVar[bool] = False
    """Some steps are pseudo-synchronization steps, with no forward or backward pass (PALSGD)."""
    partial_averaging: ClassVar[bool] = False
    """Averages part of the model each step, from the gradient hooks of the last backward pass (DreamDDP)."""
    one_bucket: ClassVar[bool] = False
    """Runs its DDP hook over one bucket (PowerSGD: gloo hangs with several, :mod:`plait.run.sync`)."""
    in_network: ClassVar[bool] = False
    """Sums in the switches where the replicas meet, which must aggregate (:mod:`plait.plan.rules`)."""
    group_local_steps: ClassVar[bool] = False
    """In a mixed-hardware data split, each group may take its own local steps between averagings
    (:mod:`plait.predict.mixed`)."""
    whole_learners: ClassVar[bool] = False
    """Trains :attr:`learners` whole model replicas inside each rank, each on its share of the micro-batch
    (:mod:`plait.run.crossbow`)."""
    site_aware: ClassVar[bool] = False
    """Sends different bytes over each tier of a group that spans sites (:mod:`plait.sync.site_topk`): its bytes per
    tier are :meth:`site_payload_bytes`."""
    servers_hold_model: ClassVar[bool] = False
    """The server ranks step the parameters, so the trained model is their pieces (:mod:`plait.run.async_train`)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            rule = broken(f, getattr(self, f.name))
            if rule is not None:
                raise MethodError(rule, f"dp_sync={self.stated!r}: {rule}")
        rule = self.problem()
        if rule is not None:
            raise MethodError(rule, f"dp_sync={self.stated!r}: {rule}")

    @property
    def method(self) -> str:
        """The method's name (:attr:`name`)."""
        return self.name

    @property
    def is_allreduce(self) -> bool:
        """Whether this is the dense gradient all-reduce every step (DDP's own reduction)."""
        return False

    @property
    def whole_gradients(self) -> bool:
        """Works on every replica's whole gradient each step (unsharded replicas only)."""
        return self.compressed or self.pipelined or self.aggregating or self.asynchronous

    every = 1
    """Steps between synchronizations: 1 for per-step methods, the periodic methods' own ``every`` field (left
    unannotated here so that it is no dataclass field and takes no place in a subclass's field order)."""

    learners = 1
    """Learners (model replicas) each data-parallel rank trains: 1 but for Crossbow's own ``learners`` field (left
    unannotated, as :attr:`every`)."""

    @property
    def server_ranks(self) -> int:
        """Ranks beyond the workers this method's servers run on (:mod:`plait.run.async_train`)."""
        return 0

    @property
    def gradient_step_fraction(self) -> float:
        """The fraction of steps that run forward, backward and the optimizer (1 but for PALSGD)."""
        return 1.0

    @property
    def spec(self) -> str:
        """The canonical ``METHOD[:key=value,...]`` text: every parameter, in declaration order."""
        params = fields(self)
        if not params:
            return self.name
        return f"{self.name}:" + ",".join(f"{f.name}={written(f, getattr(self, f.name))}" for f in params)

    @property
    def stated(self) -> str:
        """The spec with only the parameters that differ from their defaults (as one would write it)."""
        given = [f for f in fields(self) if f.default is MISSING or getattr(self, f.name) != f.default]
        return ",".join([self.name, *(f"{f.name}={written(f, getattr(self, f.name))}" for f in given)]).replace(
            ",", ":", 1)

    def problem(self) -> str | None:
        """The rule a combination of parameters breaks (each parameter alone within its bounds), or ``None``."""
        return None

    @property
    def replica_servers(self) -> int:
        """Servers this method runs on training ranks, one per replica at most (:mod:`plait.plan.rules`)."""
        return 0

    @property
    def sufficient_factors(self) -> bool:
        """Sends linear layers' gradients as sufficient factors where that moves fewer bytes (Poseidon's hybrid)."""
        return False

    @property
    def staleness_bound(self) -> int | None:
        """Steps a worker may run ahead of the slowest at its servers (``None``: unbounded or no servers)."""
        return None

    @property
    def holds_fast_workers(self) -> bool:
        """Whether a staleness bound makes unequal asynchronous workers step at the slowest's pace over a long run
        (:mod:`plait.predict.mixed`)."""
        return False

    @property
    def elastic_force(self) -> float:
        """How far a worker's pushed parameters and its centre move toward each other (0: no elastic pushes)."""
        return 0.0

    def graph(self) -> tuple[Topology, int] | None:
        """(topology, peers) of the neighbours each replica averages with (``None``: no gossip)."""
        return None

    @property
    def convergence_proxy(self) -> SyncMethod | None:
        """A method whose steps multiplier this one takes where the table has none of its own
        (:func:`plait.plan.convergence.convergence`); ``None``: none."""
        return None

    def site_payload_bytes(self, elements: int, members: int, sites: int) -> tuple[float, float]:
        """(bytes inside a site, bytes across sites) one rank hands to collectives, for a :attr:`site_aware` method."""
        raise NotImplementedError(f"{self.name} sends the same bytes on every tier")

    def step_payload_bytes(self, shapes: list[Shape], step: int | None) -> float:
        """Bytes one replica hands to its collectives in step ``step`` (``None``: the steady-state mean) for a
        method whose bytes follow from the gradient shapes alone (:func:`plait.cost.sync.payload_bytes`)."""
        raise NotImplementedError(f"{self.name} sends bytes that depend on more than the shapes")

    def sent_bytes(self, tally: Tally) -> float:
        """Bytes one replica hands to collectives (or to point-to-point sends) in the step ``tally`` describes."""
        return self.step_payload_bytes(tally.shapes, tally.step)

    def crossing_bytes(self, crossing: Crossing) -> float:
        """Bytes leaving sites per step, for a :attr:`point_to_point` method (collectives: :mod:`plait.cost.egress`)."""
        raise NotImplementedError(f"{self.name} sends in collectives")

    def step_costs(self, price: Pricing) -> Costs:
        """(overlapped seconds, exposed seconds, extra memory bytes) per step on the rows ``price`` describes
        (:func:`plait.cost.sync.method_costs`)."""
        return price.unmodelled(self)

    def comm_hook(self, hooks: GradientHooks[R]) -> R:
        """This method's DDP communication hook, from ``hooks`` (:func:`plait.run.replica_grads.comm_hook`)."""
        return hooks.uncompressed(self)

    def wrap_optimizer(self, hooks: OptimizerHooks[R]) -> R:
        """The optimizer this method steps with, from ``hooks`` (:func:`plait.run.sync.wrap_optimizer`)."""
        return hooks.plain(self)

    def worker_step(self, worker: WorkerHooks, step: int) -> None:
        """An asynchronous-runtime worker's exchange after the backward pass of ``step``
        (:mod:`plait.run.async_train`)."""
        worker.reduce_and_step()

    def __str__(self) -> str:
        return self.spec


class MethodError(ConfigError):
    """A method's parameters break a rule; :attr:`rule` is that rule alone, to be stated with the text given."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule


def broken(f: Field[Any], value: Any) -> str | None:
    """The rule parameter ``f`` holding ``value`` breaks (its bounds or names), or ``None``."""
    read = f.metadata["read"]
    if isinstance(read, Choice):
        return None if value in read.values else f"{f.name}={value!r} must be one of {', '.join(read.names)}"
    number = value if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    if math.isfinite(number) and read.low <= number <= read.high and (not read.integer or float(number).is_integer()):
        return None
    kind = "a whole number" if read.integer else "a number"
    return f"{f.name}={value} must be {kind} in [{read.low:g}, {read.high:g}]"


def written(f: Field[Any], value: Any) -> str:
    """How parameter ``f`` holding ``value`` is written in a spec."""
    read = f.metadata["read"]
    if broken(f, value) is not None:  # only in the message that refuses it
        return str(value)
    if isinstance(read, Choice):
        return read.names[read.values.index(value)]
    return str(int(value)) if read.integer else repr(float(value))


def elements_of(shapes: list[Shape]) -> int:
    """Elements in tensors of ``shapes``."""
    return sum(math.prod(s) for s in shapes)
