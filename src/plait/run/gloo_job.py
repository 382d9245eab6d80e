"""The entry of plait's small gloo workers (GNN, DiT): the single-process reference when asked, else one rank of a
torch.distributed job whose rank 0 writes the result; either way the result is JSON in ``out``. A rank leaves
without interpreter teardown once its group is destroyed (:func:`plait.run.lifecycle.exit_without_teardown`: CI saw
a finished DLRM rank abort in it)."""

from __future__ import annotations

import gc
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.distributed as dist

from plait.run.lifecycle import exit_without_teardown


def run_job(out: Path, reference: bool, work: Callable[[], dict[str, Any]]) -> int:
    """Run ``work`` alone (``reference``: returns 0) or as a rank of a gloo group (env:// from the launcher: the
    process exits 0 when done)."""
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
    exit_without_teardown(0)
