"""The entry of plait's small gloo workers (GNN, DiT): the single-process reference when asked, else one rank of a
torch.distributed job whose rank 0 writes the result; either way the result is JSON in ``out``."""

from __future__ import annotations

import gc
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.distributed as dist


def run_job(out: Path, reference: bool, work: Callable[[], dict[str, Any]]) -> int:
    """Run ``work`` alone (``reference``) or as a rank of a gloo group (env:// from the launcher)."""
    if reference:
        out.write_text(json.dumps(work()))
        return 0
    dist.init_process_group("gloo")
    result = work()
    if dist.get_rank() == 0:
        out.write_text(json.dumps(result))
    gc.collect()  # DDP's reducer sits in reference cycles: free it (and its pending work) while the group lives,
    dist.barrier()  # not during interpreter teardown, and tear down no rank's connections while another uses them
    dist.destroy_process_group()
    return 0
