"""Bytes each data-parallel replica hands to collectives per step, by synchronization method.

Payload bytes: the tensors given to ``all_reduce`` (exact integers for a model and plan); the collective's own
traffic on the wire is the payload times its algorithm's factor (ring all-reduce: ``2 (n-1)/n`` per rank,
Patarasuk & Yuan, JPDC 69(2), 2009), applied where time is costed. For a replica holding whole (unsharded)
gradients, fp32 (plait's runtime and PyTorch DDP keep gradients in the parameter dtype), each method's bytes are
its own answer (:meth:`plait.sync.base.SyncMethod.step_payload_bytes`, with the formula and its source in each
family's module: :mod:`plait.sync.allreduce`, :mod:`~plait.sync.half`, :mod:`~plait.sync.powersgd`,
:mod:`~plait.sync.sparse`, :mod:`~plait.sync.periodic`); DreamDDP's per-step share follows
:mod:`plait.plan.partial`'s schedule, and the point-to-point methods' bytes :mod:`plait.cost.servers`,
:mod:`plait.cost.gossip` and :mod:`plait.cost.async_sgd`. Time and memory are each method's answer too
(:meth:`plait.sync.base.SyncMethod.step_costs`), priced by :class:`Prices`, this layer's side of
:class:`plait.sync.hooks.Pricing`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from plait.cost.compute import fp32_flops_per_s, memory_bytes_per_s
from plait.cost.dataparallel import optimizer_step_s
from plait.cost.links import collective_s
from plait.cost.memory import optimizer_bytes_per_param, param_bytes
from plait.cost.overlap import engaged_s, hidden_remainder
from plait.cost.params import stage_layer_counts
from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns
from plait.plan.keys import distinct_rows
from plait.plan.partial import step_elements
from plait.sync import MODELLED, SyncMethod
from plait.sync.base import GRAD_BYTES as GRAD_BYTES  # fp32 gradients and parameters; plait.cost.egress
from plait.sync.hooks import Costs
from plait.workload.model import ModelSpec
from plait.workload.tensors import Shape, rank_shapes

if TYPE_CHECKING:
    from plait.sync import Gossip, ParamServer, SiteQuantize, SiteTopK, SwitchAggregation
    from plait.sync.asynchronous import Asynchronous

# The point-to-point and per-site methods' modules (plait.cost.servers, gossip, async_sgd with its event
# simulation, site_sync) are imported in the hooks that price them: a plan that all-reduces never loads them.


def payload_bytes(sync: SyncMethod, named: list[tuple[str, Shape]], step: int | None = None, rank: int = 0,
                  replicas: int = 2, tokens: int = 0) -> float:
    """Bytes one replica hands to collectives (and, for the server and gossip methods, to point-to-point sends) in one
    step (``named``: the parameters' names and shapes, :func:`plait.workload.tensors.parameter_shapes`; ``step``:
    that step, counted from 0, for the methods whose traffic changes with it; ``None``: the mean over a period in
    steady state; ``rank`` of ``replicas``: for the methods whose ranks send different bytes)."""
    return sync.sent_bytes(_Tally(named, step, rank, replicas, tokens))


@dataclass(frozen=True)
class _Tally:
    """One replica's step, as :meth:`plait.sync.base.SyncMethod.sent_bytes` asks about it
    (:class:`plait.sync.hooks.Tally`)."""

    named: list[tuple[str, Shape]]
    step: int | None
    rank: int
    replicas: int
    tokens: int

    @property
    def shapes(self) -> list[Shape]:
        return [s for _, s in self.named]

    @property
    def elements(self) -> int:
        return sum(math.prod(s) for _, s in self.named)

    def scheduled_elements(self, every: int) -> int:
        assert self.step is not None
        return step_elements(self.named, every, self.step)

    def server_bytes(self, method: ParamServer) -> float:
        from plait.cost import servers

        return float(servers.server_sent_bytes(method, self.named, self.rank, self.replicas, self.tokens))

    def switch_bytes(self, method: SwitchAggregation) -> float:
        from plait.cost import servers

        return float(servers.switch_sent_bytes(method, self.named, self.rank, self.replicas))

    def gossip_bytes(self, method: Gossip) -> float:
        from plait.cost import gossip

        return gossip.sent_bytes(method, self.elements, self.rank, self.replicas, self.step)

    def worker_bytes(self, method: Asynchronous) -> float:
        from plait.cost import async_sgd

        return async_sgd.worker_bytes(method, self.elements, self.step)


def _rank_shape_groups(model: ModelSpec, cols: PlanColumns,
                       stage: Any) -> list[tuple[Any, list[tuple[str, Shape]]]]:
    """[(rows, named)]: the local parameters (names, shapes) one rank of stage ``stage`` holds (TP rank 0: the largest
    chunks; :func:`plait.workload.tensors.rank_shapes`), for each distinct (tp, layers, first, last) among the rows
    of ``cols``; ``rows`` a mask (``True`` for one plan)."""
    xp, pp = cols.xp, cols["pp"]
    layers, _ = stage_layer_counts(model, pp, stage, xp)
    first, last = stage == 0, stage == pp - 1
    if xp.scalar:
        return [(True, rank_shapes(model, int(cols["tp"]), 0, int(layers), bool(first), bool(last)))]
    keys = [k.astype(np.int64) for k in np.broadcast_arrays(cols["tp"], layers, first, last)]
    index, inverse = distinct_rows(*keys)
    tp, n, f, lt = ([int(x) for x in k[index]] for k in keys)
    return [(inverse == i, rank_shapes(model, tp[i], 0, n[i], bool(f[i]), bool(lt[i]))) for i in range(len(index))]


def method_costs(model: ModelSpec | None, cluster: Cluster, sync: SyncMethod, cols: PlanColumns,
                 params: dict[str, Any], stage: Any = 0, busy: Any = 0.0,
                 named: list[tuple[str, Shape]] | None = None) -> tuple[Any, Any, Any]:
    """(seconds that overlap the backward pass like DDP's buckets, seconds on the critical path, extra bytes of
    memory per GPU) of ``sync`` on each row of ``cols`` (:mod:`plait.plan.rules`: ep = 1), per step in steady
    state, for one rank of the slowest stage ``stage``. ``params``: the parameters that rank holds
    (:func:`plait.cost.memory.stage_params`; TP shards, norms replicated), which local SGD and DiLoCo average with
    the same rank of every other replica; the per-step methods send its local gradient tensors
    (:func:`_rank_shape_groups`), over the replicas ``tp * cp`` ranks apart (the cp ranks of a replica average
    their gradients first: :func:`plait.cost.method_rows.cp_gradient_reduce_s`). ``busy``: the step's compute, which
    Pipe-SGD's all-reduce runs behind (Li et al. 2018, Sec. 3; contention per byte moved,
    :func:`plait.cost.overlap.engaged_s`). Each method's formula, with what it overlaps (assumed from the runtime)
    and its sources, is in its family's module (:meth:`plait.sync.base.SyncMethod.step_costs`). ``named``: the rank's
    parameters where they come from elsewhere than ``model``'s closed forms (a traced workload,
    :mod:`plait.workloads.traced.cost`; ``model`` is then unused)."""
    return sync.step_costs(Prices(model, cluster, cols, params, stage, busy, named))


@dataclass(frozen=True, eq=False)
class Prices:
    """The rows of plans a method is priced on, and this layer's prices (:class:`plait.sync.hooks.Pricing`)."""

    model: ModelSpec | None
    cluster: Cluster
    cols: PlanColumns
    params: dict[str, Any]
    stage: Any
    busy: Any
    named: list[tuple[str, Shape]] | None

    @property
    def xp(self) -> Any:
        return self.cols.xp

    @property
    def replicas(self) -> Any:
        return self.cols.dp

    @property
    def stride(self) -> Any:
        return self.cols["tp"] * self.cols["cp"]  # the same (tp, cp) piece of every replica: plait.plan.plan order

    @property
    def split(self) -> Any:
        return (self.cols["tp"] > 1) | (self.cols["pp"] > 1)

    @cached_property
    def memory_bytes_per_s(self) -> float:
        return memory_bytes_per_s(self.cluster.accelerator)

    @cached_property
    def fp32_flops_per_s(self) -> float:
        return fp32_flops_per_s(self.cluster.accelerator)

    @property
    def held_bytes(self) -> Any:
        return (self.params["dense"] + self.params["expert"]) * GRAD_BYTES

    def full(self, value: Any) -> Any:
        return self.cols.full(value)

    def all_reduce_s(self, group: Any, stride: Any, payload_bytes: Any) -> Any:
        return collective_s(self.cluster, "all_reduce", group, stride, payload_bytes)

    def all_gather_s(self, group: Any, stride: Any, payload_bytes: Any) -> Any:
        return collective_s(self.cluster, "all_gather", group, stride, payload_bytes)

    def behind_next_step_s(self, reduce_s: Any, payload_bytes: float) -> Any:
        """Pipe-SGD's all-reduce behind the whole next step (Li et al. 2018, Sec. 3), contending per byte moved
        (:func:`plait.cost.overlap.engaged_s`)."""
        replicas = self.replicas
        ring = 2.0 * (replicas - 1) / replicas * payload_bytes  # ring all-reduce, per rank (Patarasuk & Yuan 2009)
        engaged = self.xp.minimum(reduce_s, engaged_s(ring, self.cluster.tiers[0].bandwidth_bytes_per_s(payload_bytes)))
        overlap = self.cluster.accelerator.efficiency.comm_overlap.value
        return hidden_remainder(reduce_s, self.busy, overlap, self.xp, engaged)

    @property
    def optimizer_step_s(self) -> Any:
        return optimizer_step_s(self.cluster, self.cols, self.params, self.cols.full(float(GRAD_BYTES)))

    @property
    def replica_state_bytes(self) -> Any:
        per_param = param_bytes(self.cols) + GRAD_BYTES + optimizer_bytes_per_param(self.cols)
        return (self.params["dense"] + self.params["expert"]) * per_param

    def averaging_group(self) -> tuple[Any, Any, Any]:
        cols, xp = self.cols, self.cols.xp
        whole = cols.is_("sharding", "none")
        shard = xp.where(whole, 1, cols["dp_shard"])  # ep = 1; cp > 1 only unsharded (plait.plan.rules)
        group, local = xp.where(whole, cols.dp, cols["dp_replicate"]), self.held_bytes / shard
        return group, shard * cols["tp"] * cols["cp"], local  # replicas tp*cp*shard apart

    def per_rank_tensors(self, costs: Any) -> Costs:
        return self._spread(lambda held: costs([shape for _, shape in held]))

    def site_costs(self, method: SiteTopK | SiteQuantize) -> Costs:
        from plait.cost import site_sync

        return self._spread(lambda held: site_sync.site_costs(
            self.cluster, method, self.cols, sum(math.prod(s) for _, s in held), self.memory_bytes_per_s))

    def server_costs(self, method: ParamServer) -> Costs:
        from plait.cost import servers

        return self._spread(lambda held: servers.server_costs(self.cluster, method, self.cols, held))

    def switch_costs(self, method: SwitchAggregation) -> Costs:
        from plait.cost import servers

        return self._spread(lambda held: servers.switch_costs(self.cluster, method, self.cols, held))

    def _spread(self, costs: Any) -> Costs:
        """``costs(named)`` of the parameters one rank of the priced stage holds (per distinct holding), per row."""
        groups = ([(True, self.named)] if self.named is not None
                  else _rank_shape_groups(self.model, self.cols, self.stage))  # type: ignore[arg-type]
        over = shown = extra = self.cols.zeros()
        for rows, held in groups:
            o, s, e = costs(held)
            over, shown, extra = (self.xp.where(rows, new, old) for new, old in ((o, over), (s, shown), (e, extra)))
        return over, shown, extra

    def gossip_costs(self, method: Gossip) -> Costs:
        from plait.cost import gossip

        group, stride, local = self.averaging_group()  # neighbours exchange copies instead (plait.cost.gossip)
        return gossip.gossip_costs(self.cluster, method, self.cols, group, stride, local / GRAD_BYTES, self.busy)

    def async_costs(self, method: Asynchronous) -> Costs:
        """Closed-network bounds (:mod:`plait.cost.async_sgd`), with the rank's tensor count (the runtime's
        per-tensor host work, :mod:`plait.cost.async_host`)."""
        from plait.cost import async_sgd

        elements = self.params["dense"] + self.params["expert"]
        return self._spread(lambda held: async_sgd.async_costs(self.cluster, method, self.cols, elements, self.busy,
                                                               len(held)))

    def unmodelled(self, method: SyncMethod) -> NoReturn:
        raise ConfigError(f"dp_sync={method.spec!r}: not modelled yet (modelled: {', '.join(MODELLED)})")
