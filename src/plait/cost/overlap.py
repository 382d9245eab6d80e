"""What a collective costs when it runs beside compute.

A collective overlapped with compute is not free: NCCL kernels occupy SMs (one thread
block per channel) and HBM bandwidth, so the compute kernels running beside them slow
down. Lee et al. 2025 ("Characterizing Compute-Communication Overlap in GPU-Accelerated
Distributed Deep Learning", arXiv 2507.03114, abstract) measure an average compute
slowdown of 18.9% (up to 40%) while overlapped, on A100, H100, MI250 and MI210. The
accelerator's ``comm_overlap`` figure is the share of the overlapped interval that stays
hidden (``1 - slowdown``).
"""

from __future__ import annotations

from typing import Any

from plait.plan.ops import Ops


def hidden_remainder(comm: Any, compute: Any, overlap: float, xp: Ops, engaged: Any = None) -> Any:
    """Exposed part of ``comm`` run alongside ``compute``: what exceeds the compute, plus the share of
    the overlapped interval the compute loses to contention (``overlap`` = 1 loses nothing); columns or, with
    ``xp`` = :data:`~plait.plan.ops.SCALAR`, floats. ``engaged``: the seconds of ``comm`` that contend with the
    compute (all of it unless given: :func:`engaged_s`)."""
    busy = comm if engaged is None else engaged
    return xp.maximum(0.0, comm - compute) + (1.0 - overlap) * xp.minimum(busy, compute)


def engaged_s(ring_bytes: Any, innermost_bytes_per_s: float) -> Any:
    """Seconds a collective's endpoints spend moving its ``ring_bytes`` (what each rank sends and receives) at
    the innermost tier's rate, where ``comm_overlap`` is measured (``plait calibrate``).

    Assumed: the contention is per byte the endpoints move — the copies and reductions a CPU makes for gloo
    (a loopback all-reduce is CPU-bound: ``plait calibrate`` measures it hiding nothing), the HBM traffic of
    NCCL's kernels — not per second spent waiting on a slower wire. Measured by ``benchmarks/low_comm.py`` on
    2026-12-02, on a host whose loopback overlap figure was 0, Pipe-SGD's steps over a 200 Mbit/s link took 0.69 s
    against 0.56 s predicted for the all-reduce and 0.22 s for compute and optimizer: the compute hid behind the
    wire. Left out: SMs that NCCL kernels hold while they wait on the network."""
    return ring_bytes / innermost_bytes_per_s
