"""Gradient sums outside the all-reduce: parameter servers and in-network aggregation.

Bytes (what each rank hands to point-to-point sends per step, as the runtime :mod:`plait.run.servers` counts them;
``E`` gradient elements of the rank, fp32):

- ``param_server:servers=S,host=ranks``: servers on the replicas of group rank ``0..S-1``, server ``j`` summing the
  ``L_j`` elements :func:`plait.plan.servers.placement` gives it. Rank ``r`` pushes every piece but its own
  (``4 (E - L_r)``, ``L_r = 0`` off the servers) and, as a server, sends the sum back to the ``N - 1`` others
  (``4 (N - 1) L_r``). The servers sum and the replicas step their own optimizers on the pulled sum (BytePS's
  summation service, Jiang et al., OSDI 2020, Sec. 4.1: servers that run the optimizer would pull parameters of
  the same size instead).
- ``param_server:...,hybrid=true``: the linear weights :func:`plait.plan.factors.factored` picks travel as
  sufficient factors instead, ``4 K (M + N)`` fp32 elements to each of the ``N - 1`` peers (Poseidon, Zhang et
  al., USENIX ATC 2017, Sec. 3.2); the servers sum the rest, placed as without them;
- ``param_server:servers=S,host=cpu``: servers on CPU machines (ranks beyond the workers, :mod:`plait.run.
  async_train`): a replica pushes every piece with two header values, ``4 (E + 2 S)``, and pulls the mean;
- ``switch_aggregation:bits=B``: each replica sends its gradient once as ``B``-bit fixed point, with one exponent
  byte per slot of :data:`SLOT_ELEMENTS` elements, and receives the sum once (SwitchML, Sapio et al., NSDI 2021,
  Sec. 3.3 and 4.4). plait's runtime emulates the switch on group rank 0, which sends the sum to the others.

Time. BytePS's communication time is the larger of what a worker and what a server must move over its NIC (Jiang et
al. 2020, Sec. 3.1, Eq. 1-2), here with the servers on training ranks and in two phases, as plait's runtime runs
them (a server replies once it holds every piece): in the push a server receives ``4 (N - 1) L_j`` bytes and a
worker without a server sends ``4 E``, and the pull mirrors it, so ``S = N`` balanced servers move the ring
all-reduce's ``2 (N-1)/N`` of the buffer and one server ``N - 1`` times more. A rank's peers are the ``N - 1``
others: the share of them outside its scale-up domain crosses its NIC, the rest NVLink, in parallel. With a switch, each rank's payload crosses its link once each way
at the tier's line rate times the payload fraction, capped by the switch's slot window (SwitchML Sec. 3.4); a
group wider than one scale-up domain first reduce-scatters inside each domain, aggregates its shard in the switch
and all-gathers inside again (NCCL's CollNet; Graham et al., "Scalable Hierarchical Aggregation Protocol (SHArP)",
COMHPC 2016, Sec. 3), the three streams pipelined in chunks, so the slower of the domain's and the switch's sets
the time and their latencies add (NCCL's tuning model charges CollNet one bandwidth and the sum of the intra- and
inter-node latencies: src/graph/tuning.cc, ncclTopoTuneModel). GPUDirect RDMA's PCIe hop is taken as no slower than the NIC. Sufficient factors go to every peer at once, each
rank sending and receiving ``(N - 1)`` copies of its factors over the same spread as the servers' phases, before
them; each rank then rebuilds every factored gradient with one GEMM over all replicas' factors
(:func:`plait.plan.factors.rebuild_flops`, at the fp32 peak) and holds all replicas' factors while it does.
"""

from __future__ import annotations

import math
from typing import Any

from plait.cost.collectives import GroupLink, group_link
from plait.cost.compute import fp32_flops_per_s, memory_bytes_per_s
from plait.cost.distinct import per_distinct
from plait.errors import ConfigError
from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns
from plait.plan.factors import factor_elements, factored, rebuild_flops
from plait.plan.servers import placement
from plait.sync import ParamServer, SwitchAggregation
from plait.workload.tensors import Shape

GRAD_BYTES = 4
SLOT_ELEMENTS = 64
"""Gradient elements one switch slot sums: SwitchML's packets carry ``k = 64`` 32-bit elements (Sapio et al. 2021,
Sec. 5, "Implementation")."""
HEADER_ELEMENTS = 2
"""fp32 values after each piece an asynchronous worker sends its server: the message's kind and the parameter
version it was computed on (:mod:`plait.run.async_train`)."""
FLAT_PASSES = 6
"""Streaming passes over a replica's gradient in :class:`plait.run.servers.ParamServer` besides the servers' sums:
the flat copy (read, write), the pulled pieces joined (read, write) and copied into the gradients (read, write). A
server adds each of the ``N`` pieces into its total (read two, write one) and divides it (read, write)."""
EXPONENT_BYTES = 1
"""Bytes of the shared exponent that travels with each slot (SwitchML Sec. 4.4: the block exponent rides in the
packet)."""


def factored_tensors(sync: ParamServer, named: list[tuple[str, Shape]], tokens: int, replicas: int) -> list[bool]:
    """Per tensor of ``named``, whether it travels as sufficient factors (``tokens`` rows per replica and step)."""
    if not sync.hybrid:
        return [False] * len(named)
    return factored(named, tokens, replicas, min(sync.servers, replicas))


def server_loads(sync: ParamServer, shapes: list[Shape], replicas: int) -> list[int]:
    """Elements each parameter server sums of the tensors of ``shapes`` (the servers' tensors: with ``hybrid``,
    those not factored); servers on the replicas: at most one per replica (the plan rules)."""
    servers = sync.servers if sync.on_cpus else min(sync.servers, replicas)
    return placement(shapes, servers, sync.placement)[1]


def switch_bytes(sync: SwitchAggregation, elements: int) -> int:
    """Bytes one replica sends to the switch per step: fixed-point codes and one exponent per slot."""
    codes = elements * sync.bits // 8
    return codes + math.ceil(elements / SLOT_ELEMENTS) * EXPONENT_BYTES


def switch_sent_bytes(sync: SwitchAggregation, named: list[tuple[str, Shape]], rank: int, replicas: int) -> int:
    """Bytes group rank ``rank`` of ``replicas`` hands to sends in one step of in-network aggregation (group rank 0
    emulates the switch; module docstring); ``named``: the rank's parameters."""
    if replicas <= 1:
        return 0
    each = switch_bytes(sync, sum(math.prod(s) for _, s in named))
    return (replicas - 1) * each if rank == 0 else each


def server_sent_bytes(sync: ParamServer, named: list[tuple[str, Shape]], rank: int, replicas: int,
                      tokens: int = 0) -> int:
    """Bytes group rank ``rank`` of ``replicas`` hands to sends in one step of parameter servers (module
    docstring); ``named``: the rank's parameters, ``tokens``: its rows per step (what ``hybrid`` decides on)."""
    if replicas <= 1:
        return 0
    flags = factored_tensors(sync, named, tokens, replicas)
    factors = GRAD_BYTES * (replicas - 1) * factor_elements(named, flags, tokens)
    shapes = [s for (_, s), f in zip(named, flags) if not f]
    elements = sum(math.prod(s) for s in shapes)
    loads = server_loads(sync, shapes, replicas)
    if sync.on_cpus:  # every piece to its server rank, with its header (plait.run.async_train)
        return GRAD_BYTES * (elements + HEADER_ELEMENTS * len(loads))
    own = loads[rank] if rank < len(loads) else 0
    return factors + GRAD_BYTES * ((elements - own) + (replicas - 1) * own)


def server_costs(cluster: Cluster, sync: ParamServer, cols: PlanColumns,
                 named: list[tuple[str, Shape]]) -> tuple[Any, Any, Any]:
    """(0, exposed seconds, extra bytes of memory) per row of ``cols`` for ``param_server`` over the replicas
    (``tp`` ranks apart) of a rank holding ``named``, after the backward pass."""
    tokens = cols["global_batch"] * cols["seq_len"] // cols.dp if sync.hybrid else 0
    return (cols.zeros(), *per_distinct(
        cols, lambda n, t, k: _server_one(cluster, sync, named, int(n), int(t), int(k)), cols.dp, cols["tp"], tokens))


def switch_costs(cluster: Cluster, sync: SwitchAggregation, cols: PlanColumns,
                 named: list[tuple[str, Shape]]) -> tuple[Any, Any, Any]:
    """:func:`server_costs` of ``switch_aggregation``."""
    elements = sum(math.prod(s) for _, s in named)

    def one(replicas: int, stride: int) -> tuple[float, float]:
        if replicas <= 1:
            return 0.0, 0.0
        return _switch_s(cluster, sync, elements, replicas, stride), 2.0 * switch_bytes(sync, elements)

    return (cols.zeros(), *per_distinct(cols, lambda n, t: one(int(n), int(t)), cols.dp, cols["tp"]))


def _server_one(cluster: Cluster, sync: ParamServer, named: list[tuple[str, Shape]], replicas: int, stride: int,
                tokens: int) -> tuple[float, float]:
    if replicas <= 1:
        return 0.0, 0.0
    link = group_link(cluster, replicas, stride)
    flags = factored_tensors(sync, named, tokens, replicas)
    shapes = [s for (_, s), f in zip(named, flags) if not f]
    elements = sum(math.prod(s) for s in shapes)
    if sync.on_cpus:
        return _cpu_servers_s(cluster, sync, shapes, replicas, stride), 2.0 * GRAD_BYTES * elements
    loads = server_loads(sync, shapes, replicas)
    # each phase (push, then pull: a server replies once it has every piece) waits for its busiest rank: a
    # server sends or receives (N-1) L_j and the other pieces, a worker without a server all E
    ranks = [max(elements - load, (replicas - 1) * load) for load in loads]  # the servers' ranks
    phase = GRAD_BYTES * max(*ranks, elements if len(loads) < replicas else 0)
    streamed = FLAT_PASSES * elements + (3 * replicas + 2) * max(loads)  # the flat buffer; a server's sums
    summed = GRAD_BYTES * streamed / memory_bytes_per_s(cluster.accelerator)
    held = GRAD_BYTES * (elements + (replicas - 1) * max(loads))
    factors = factor_elements(named, flags, tokens)
    if factors:  # every peer's factors, then one GEMM per factored tensor (module docstring)
        summed += (_spread_s(GRAD_BYTES * (replicas - 1) * factors, link)
                   + rebuild_flops(named, flags, tokens, replicas) / fp32_flops_per_s(cluster.accelerator))
        held = max(held, GRAD_BYTES * replicas * factors)
    return summed + 2 * _spread_s(phase, link), held


def _spread_s(sent: float, link: GroupLink) -> float:
    """Seconds for a rank to send (or receive) ``sent`` bytes spread evenly over the ``N - 1`` other ranks of its
    group: the share bound for peers outside its scale-up domain, ``(N - inside) / (N - 1)``, crosses the outer
    tier, the rest the scale-up links, in parallel."""
    g, inside = link.size, link.members_per_domain
    outside = sent * (g - inside) / (g - 1)
    time = (sent - outside) / link.bus_bytes_per_s(sent)
    if outside:
        time = max(time, outside / link.cross_bytes_per_s(sent))
    return link.latency_s + time


def _cpu_servers_s(cluster: Cluster, sync: ParamServer, shapes: list[Shape], replicas: int, stride: int) -> float:
    """Seconds of one synchronous round through ``S`` servers on CPU machines: a worker pushes ``4 (E + 2S)`` bytes
    and pulls as many; a server receives and sends ``N`` times its piece and sums ``N`` pieces; the round takes
    the slower side, each way (BytePS, Jiang et al. 2020, Sec. 3.1, Eq. 1-2). Assumed: a server process gets one
    GPU's share of the NIC of the tier the workers meet on, and of the node's host memory bandwidth."""
    loads = server_loads(sync, shapes, replicas)
    tier = cluster.tiers[group_link(cluster, replicas, stride).tier]
    worker = GRAD_BYTES * (sum(loads) + HEADER_ELEMENTS * len(loads))
    server = replicas * GRAD_BYTES * (max(loads) + HEADER_ELEMENTS)
    rate = tier.bandwidth_bytes_per_s(max(worker, server), "all_gather")
    summed = (replicas + 1) * GRAD_BYTES * max(loads) / cluster.host_memory_bytes_per_s_per_gpu
    return 2 * (tier.latency_s + max(worker, server) / rate) + summed


def _switch_s(cluster: Cluster, sync: SwitchAggregation, elements: int, replicas: int, stride: int) -> float:
    """Seconds of one switch aggregation of every replica's gradient (module docstring)."""
    link = group_link(cluster, replicas, stride)
    tier = cluster.tiers[link.tier]
    if tier.aggregation is None:
        raise ConfigError(f"dp_sync={sync.spec!r}: the replicas meet on tier {tier.name!r}, whose switches do not "
                          "aggregate (give the tier an 'aggregation' table)")
    inside = link.members_per_domain if link.tier > 0 else 1
    payload = switch_bytes(sync, elements) / inside
    rate = min(tier.line_bytes_per_s * tier.aggregation.payload_fraction, tier.aggregation.window_bytes_per_s)
    latency, streamed = tier.aggregation.round_trip_us * 1e-6, payload / rate
    if inside > 1:  # reduce-scatter and all-gather inside each domain, ring on tier 0, pipelined with the switch
        domain = group_link(cluster, inside, stride)
        full = GRAD_BYTES * elements
        latency += 2 * (inside - 1) * domain.latency_s
        streamed = max(streamed, 2 * (inside - 1) / inside * full / domain.bus_bytes_per_s(full, "reduce_scatter"))
    return latency + streamed
