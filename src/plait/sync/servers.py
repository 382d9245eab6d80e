"""Aggregation outside an all-reduce: sharded parameter servers and in-network (switch) aggregation.

- ``param_server:servers=S[,placement=balanced|layerwise][,host=ranks|cpu][,hybrid=true]``: sharded parameter
  servers (BytePS, Jiang et al. OSDI 2020; Poseidon, Zhang et al. ATC 2017): each replica pushes its gradient, a
  server shard sums it and steps its parameters, each replica pulls them back; tensors placed on servers by bytes
  (``balanced``: a flat split, as BytePS's partitions) or whole, per tensor, largest first onto the least-loaded
  server (``layerwise``: per-layer placement); servers on ``S`` of the training ranks or on CPU machines;
  ``hybrid=true``: Poseidon's hybrid communication, each linear layer's gradient broadcast as its sufficient
  factors to every peer instead wherever that moves fewer bytes (:mod:`plait.plan.factors`);
- ``switch_aggregation[:bits=32|16]``: in-network aggregation (SwitchML, Sapio et al. NSDI 2021; NVIDIA SHARP):
  each replica sends its gradient once, in fixed point, and receives the sum once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from plait.sync.base import SyncMethod, choice, number

if TYPE_CHECKING:
    from plait.sync.hooks import Costs, Crossing, OptimizerHooks, Pricing, R, Tally, WorkerHooks

Placement = Literal["balanced", "layerwise"]
Host = Literal["ranks", "cpu"]
SWITCH_BITS = (16, 32)
"""The fixed-point widths a switch sums in."""


@dataclass(frozen=True, kw_only=True)
class ParamServer(SyncMethod):
    """Sharded parameter servers (BytePS; Poseidon)."""

    name: ClassVar[str] = "param_server"
    aggregating: ClassVar[bool] = True
    point_to_point: ClassVar[bool] = True

    servers: int = number(1, 1, 2**20, True)
    """Server shards."""
    placement: Placement = choice("balanced", ("balanced", "layerwise"))
    """How tensors are placed on the servers: a flat split by bytes, or whole tensors, largest first."""
    host: Host = choice("ranks", ("ranks", "cpu"))
    """Where the servers run: on ``servers`` of the training ranks, or on CPU machines beyond them."""
    hybrid: bool = choice(False, ("false", "true"), (False, True))
    """Poseidon's hybrid communication: linear layers' sufficient factors broadcast where that moves fewer bytes."""

    @property
    def on_cpus(self) -> bool:
        """Whether the servers run on CPU machines beyond the training ranks."""
        return self.host == "cpu"

    @property
    def server_ranks(self) -> int:
        """``servers`` on CPU machines, none on the training ranks."""
        return self.servers if self.on_cpus else 0

    @property
    def replica_servers(self) -> int:
        """``servers`` on the training ranks, none on CPU machines."""
        return 0 if self.on_cpus else self.servers

    @property
    def sufficient_factors(self) -> bool:
        return self.hybrid

    def sent_bytes(self, tally: Tally) -> float:
        return tally.server_bytes(self)

    def crossing_bytes(self, crossing: Crossing) -> float:
        return crossing.server_bytes(self)

    def step_costs(self, price: Pricing) -> Costs:
        return price.server_costs(self)

    def wrap_optimizer(self, hooks: OptimizerHooks[R]) -> R:
        return hooks.param_server(self)

    def worker_step(self, worker: WorkerHooks, step: int) -> None:
        if self.on_cpus:  # push the gradient, pull the mean, step here
            worker.push_sum()
        else:
            worker.reduce_and_step()


@dataclass(frozen=True, kw_only=True)
class SwitchAggregation(SyncMethod):
    """In-network aggregation (SwitchML; NVIDIA SHARP)."""

    name: ClassVar[str] = "switch_aggregation"
    aggregating: ClassVar[bool] = True
    point_to_point: ClassVar[bool] = True
    in_network: ClassVar[bool] = True

    bits: int = number(32, 16, 32, True)
    """The fixed-point width the switch sums in: one of :data:`SWITCH_BITS`."""

    def problem(self) -> str | None:
        if self.bits not in SWITCH_BITS:
            return f"bits must be one of {', '.join(map(str, SWITCH_BITS))}"
        return None

    def sent_bytes(self, tally: Tally) -> float:
        return tally.switch_bytes(self)

    def crossing_bytes(self, crossing: Crossing) -> float:
        """None: the switch sits inside one site (the plan rules refuse one across a wide-area tier)."""
        return 0.0

    def step_costs(self, price: Pricing) -> Costs:
        return price.switch_costs(self)

    def wrap_optimizer(self, hooks: OptimizerHooks[R]) -> R:
        return hooks.switch_aggregation(self)
