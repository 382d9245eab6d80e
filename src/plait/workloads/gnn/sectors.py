"""Random reads on NVIDIA GPUs move whole sectors: the values a read narrower than a sector costs."""

from __future__ import annotations

from plait.workloads.gnn.model import FEATURE_BYTES

SECTOR_BYTES = 32
"""The smallest global-memory transaction of NVIDIA GPUs: a warp's loads are served in 32-byte transactions (NVIDIA,
*CUDA C++ Best Practices Guide*, "Coalesced Access to Global Memory", compute capability 6.0 and higher; CUPTI counts
``l2_transactions`` in the same 32-byte units), so a random read narrower than 32 bytes still moves 32."""


def sector_values(values: float) -> float:
    """fp32 values a random read of ``values`` contiguous fp32 values moves: whole :data:`SECTOR_BYTES` sectors."""
    per_sector = SECTOR_BYTES // FEATURE_BYTES
    return -(-values // per_sector) * per_sector


