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

from plait.plan.ops import ARRAY, Ops


def hidden_remainder(comm: Any, compute: Any, overlap: float, xp: Ops = ARRAY) -> Any:
    """Exposed part of ``comm`` run alongside ``compute``: what exceeds the compute, plus the share of
    the overlapped interval the compute loses to contention (``overlap`` = 1 loses nothing); columns or, with
    ``xp`` = :data:`~plait.plan.ops.SCALAR`, floats."""
    return xp.maximum(0.0, comm - compute) + (1.0 - overlap) * xp.minimum(comm, compute)
