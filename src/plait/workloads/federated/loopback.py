"""A round of ``plait run``'s federation (:mod:`.worker`) predicted on a cluster of this machine's ranks (``--cluster``:
the description ``plait calibrate`` writes), instead of the TOML's clients and WAN link: the same round as
:mod:`.cost` with the calibrated CPU in place of the client's device and the loopback's gloo figures in place of
its link.

- Client compute: :func:`.cost.client_flops` at the calibrated fp32 peak times its fp32 matmul curve at the body's
  largest product (its square edge ``3 / (1/N + 1/a + 1/b)``, as :mod:`plait.cost.compute`'s roofline reads the
  curve), plus the client's host stream: the operators one client's round dispatches (eager autograd: counted by
  :func:`plait.workloads.op_count.launches` on the toy's round) at :func:`plait.cost.host.issue_s` each, added on a CPU, which runs
  each op inside its call (:func:`plait.cost.host.exposed_host_s`).
- Clients share the machine: ``m`` clients computing at once on ``D`` calibrated ranks' cores each progress at
  ``min(1, D / m)`` of a core (processor sharing, Kleinrock, "Time-shared systems: a theoretical analysis", JACM
  14(2), 1967); the server waits in its receives meanwhile (assumed: gloo's blocking receive takes no core).
- Transfers: the server sends the ``m`` selected clients their download one after the other and receives their
  uploads likewise, over its one link: one latency and ``m`` messages at the loopback tier's point-to-point
  bandwidth each way (the alpha-beta model of :func:`plait.cost.collectives.p2p_s`, Thakur et al. 2005, Sec. 2).
- The toy's clients are equal (no straggler factor); the server's step is not costed, as in :mod:`.cost`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from plait.cost.collectives import group_link
from plait.cost.compute import fp32_flops_per_s
from plait.cost.host import exposed_host_s, issue_s
from plait.hardware.cluster import Cluster
from plait.workloads.federated.cost import client_flops, participants, shapes, transfer_bytes
from plait.workloads.federated.model import FederatedSpec, Method


@dataclass(frozen=True, kw_only=True)
class LoopbackRound:
    """One round of the run's federation on the cluster's ranks (seconds)."""

    compute_s: float
    """One client's compute, its host's launches included, slowed by the clients sharing the cores."""
    transfer_s: float
    """The server's downloads and uploads."""
    launches: int
    """Operators one client's round dispatches."""

    @property
    def round_s(self) -> float:
        """The round: downloads, the clients' compute, uploads."""
        return self.compute_s + self.transfer_s


def loopback_round(spec: FederatedSpec, cluster: Cluster, method: Method, clients: int, participation: float,
                   launches: int) -> LoopbackRound:
    """A round of ``method`` with ``clients`` client ranks (``participation`` of them selected) on ``cluster``'s
    ranks, one client's round dispatching ``launches`` operators (module docstring)."""
    f, s, acc = spec.federation, shapes(spec.model), cluster.accelerator
    widths = (spec.model.inputs, *spec.model.body)
    edge = max(3.0 / (1.0 / f.batch + 1.0 / a + 1.0 / b) for a, b in zip(widths, widths[1:]))
    curve = acc.efficiency.matmul_fp32 or acc.efficiency.matmul_bf16
    rate = fp32_flops_per_s(acc) * curve.at(edge)
    device = client_flops(s, method, f.local_steps, f.batch, f.batch == f.samples_per_client) / rate
    host = launches * issue_s(acc, eager=True)
    m = participants(clients, participation)
    shared = max(1.0, m / cluster.gpus_per_node)
    compute = (device + float(exposed_host_s(device, host, np, acc.asynchronous_launch))) * shared
    link = group_link(cluster, 2, 1)
    down, up = transfer_bytes(s, method, f.bytes_per_value)
    transfer = sum(link.latency_s + m * num / link.cross_bytes_per_s(num) for num in (down, up))
    return LoopbackRound(compute_s=compute, transfer_s=transfer, launches=launches)
