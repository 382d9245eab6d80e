"""A rank's own part of a tensor, without importing DTensor where none can exist.

A DDP or single-process rank never builds a DTensor, and importing ``torch.distributed.tensor`` is about 0.7 s of
a rank's 2.3 s start-up (``python -X importtime -c "import plait.run.worker"``, torch 2.13 on this CPU): the modules
that may see one ask here, and only the plans that shard with FSDP2 or DTensor import it (plait/run/parallel.py).
"""

from __future__ import annotations

import sys

import torch


def is_dtensor(t: object) -> bool:
    """``t`` is a DTensor (none exists before ``torch.distributed.tensor`` is imported)."""
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(t, module.DTensor)


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The tensor this rank holds of ``t`` (its shard, for a DTensor), writable in place."""
    return t.to_local() if is_dtensor(t) else t  # type: ignore[attr-defined, no-any-return]
