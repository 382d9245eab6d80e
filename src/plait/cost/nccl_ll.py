"""NCCL's low-latency (LL) protocol: the time of a small collective.

NCCL picks, per call, the (algorithm, protocol) its cost model says is fastest: ``latency + bytes / bandwidth``
(src/graph/tuning.cc, ``ncclTopoGetAlgoTime``). For small buffers that is the ring with the LL protocol, whose
8-byte flag-carrying stores cut the per-step latency to well under a microsecond on NVLink at a quarter of the
bus bandwidth. :mod:`plait.cost.collectives` costs a collective by its tier's measured bus bandwidth plus a per-step
latency; this module gives the LL alternative, and the collective takes the faster of the two, as NCCL does. The
measured curves are net of that per-step latency (:mod:`plait.hardware.net_curves`); this module reads only their
plateau, where the latency is a vanishing share. Where a curve has a point of its own run, that point is NCCL's
choice already, and this model can come out below it (it does for 8 A100 at 1 MB, the dgx-a100-ib curve's first point).

Figures of NVIDIA/nccl src/graph/tuning.cc @b6475625 (NCCL 2.19-era), ring algorithm, LL protocol:

- ``baseLat`` 6.6 us per call;
- ``hwLat`` per step: 0.6 us over NVLink, 1.0 us over PCIe, 2.7 us over the network; a ring that spans nodes pays
  each intra-node step at least the network post overhead, 1 us on Intel hosts (``getNetOverhead``);
- steps: ``2 (n - 1)`` for an all-reduce, ``n - 1`` for an all-gather or reduce-scatter, of which ``2 nodes``
  (all-reduce) or ``nodes - 1`` cross the network;
- bus bandwidth: a quarter of the ring's (a third for an all-gather or reduce-scatter inside one node), at most
  ``llMaxBw``: 87.7 GB/s in one node (Ampere and Hopper), 39.0 GB/s over two nodes and 20.4 beyond (Intel hosts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the link's type only: plait.cost.collectives calls this module
    from plait.cost.collectives import GroupLink

BASE_LATENCY_US = 6.6
STEP_LATENCY_US = {"nvlink": 0.6, "pci": 1.0, "net": 2.7}
NET_OVERHEAD_US = 1.0
MAX_BUS_GB_PER_S = {1: 87.7, 2: 39.0}
MAX_BUS_MANY_NODES_GB_PER_S = 20.4
LARGE_MESSAGE_BYTES = 1e12
"""A buffer large enough to read a tier's bandwidth curve at its plateau."""


def ll_s(kind: str, full_bytes: float, link: GroupLink) -> float:
    """Seconds of collective ``kind`` (``all_reduce``, ``all_gather``, ``reduce_scatter``) of a ``full_bytes`` buffer
    over ``link`` by NCCL's ring LL protocol (module docstring); infinite on another back-end and across sites (a wide-area group runs its
    own hierarchical schedule, :func:`plait.cost.collectives.all_reduce_s`)."""
    if link.size <= 1 or full_bytes <= 0:
        return 0.0
    terms = link.ll_cache.get(kind)
    if terms is None:  # kept on the link (itself kept per cluster and group): hashing it would cost more than this
        terms = link.ll_cache[kind] = _ll_terms(kind, link)
    latency_s, bytes_per_s = terms
    return latency_s + full_bytes / bytes_per_s


def _ll_terms(kind: str, link: GroupLink) -> tuple[float, float]:
    """(latency, seconds per buffer byte as a rate) of :func:`ll_s` for one group and collective, computed once."""
    g = link.size
    if link.sites > 1 or not link.paths or not link.nccl_protocols:  # LL is NCCL's: other libraries lack it
        return float("inf"), float("inf")
    nodes = max(1, -(-g // link.members_per_domain))
    all_reduce = kind == "all_reduce"
    steps = 2 * (g - 1) if all_reduce else g - 1
    inter = (2 * nodes if nodes > 1 else 0) if all_reduce else nodes - 1
    inner = link.paths[0][1]
    intra_us = STEP_LATENCY_US["pci" if inner.name.lower().startswith("pci") else "nvlink"]
    if nodes > 1:
        intra_us = max(intra_us, NET_OVERHEAD_US)
    latency_us = BASE_LATENCY_US + (steps - inter) * intra_us + inter * STEP_LATENCY_US["net"]
    share = 1 / 4 if all_reduce or nodes > 1 else 1 / 3
    cap = MAX_BUS_GB_PER_S.get(nodes, MAX_BUS_MANY_NODES_GB_PER_S) * 1e9
    bus = min(cap, share * link.bus_bytes_per_s(LARGE_MESSAGE_BYTES, kind))
    return latency_us * 1e-6, bus * g / steps
