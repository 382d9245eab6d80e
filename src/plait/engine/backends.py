"""Collective libraries (NCCL, MPI, gloo, gRPC) as views of a cluster whose tiers describe NCCL.

A cluster's tiers carry nccl-tests bus bandwidth and NCCL's per-step latency (:mod:`plait.cost.collectives`). Another
library moves the same buffers over the same links with its own per-step latency (alpha) and a fraction of NCCL's
bandwidth (beta's reciprocal), by message-size regime and tier class, and without NCCL's low-latency protocol: the
alpha-beta model of Thakur, Rabenseifner & Gropp 2005 (Sec. 2) with the library's own alpha and beta. Each figure,
with its source, is in ``data/backends.toml``; Awan et al. 2019 (CCGrid, arXiv 1810.11112) characterise gRPC, MPI and
NCCL under TensorFlow and give MVAPICH2-GDR's Allreduce against NCCL2.

The back-end is the engine's choice (``EngineFacts.collective_backend``, or ``plait estimate --backend``); the empty
default means the cluster's own, so nothing changes unless a back-end is named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from plait.hardware.cluster import COLLECTIVE_BACKENDS, Cluster

if TYPE_CHECKING:
    from plait.engine.backend_views import BackendFacts

BACKENDS: tuple[str, ...] = COLLECTIVE_BACKENDS
"""The back-ends :func:`backend_facts` describes."""


def backend_facts(name: str) -> BackendFacts:
    """The packaged facts of back-end ``name`` (``data/backends.toml``)."""
    from plait.engine.backend_views import backend_facts as packaged  # the figures load only when a back-end is named

    return packaged(name)


def with_backend(cluster: Cluster, name: str) -> Cluster:
    """``cluster`` as its collectives run on back-end ``name`` (``""``: the cluster's own), kept on the cluster.

    Only an NCCL-described cluster has other views: the figures are relative to NCCL's."""
    if name in ("", cluster.collective_backend):
        return cluster
    from plait.engine.backend_views import seen_through  # a plain estimate on the cluster's own never loads it

    return seen_through(cluster, name)
