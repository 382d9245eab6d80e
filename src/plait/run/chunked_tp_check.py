"""A plan trained by plait's runtime with its collectives whole and chunked, on the ranks already up (gloo, fp32).

:func:`train_both` builds the plan's model twice through the runtime's own path (:func:`plait.run.rank_setup.build_parts`,
:func:`plait.run.worker.train_step`): once with ``overlap_chunks = 1`` (DTensor's TP) and once with ``chunks``
(:mod:`plait.run.chunked_tp`, :mod:`plait.run.chunked_moe`), each from the same seed over the same batches, and
returns each step's loss (averaged over the replicas) and, for the chunked run, the messages and buffer bytes this
rank's chunked collectives carried. Started from
:mod:`plait.run.chunked_check` (``--plan``), so one launch of ranks checks the primitives and a whole model.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from plait.plan.io import read_plan_parts
from plait.run import data
from plait.run.chunked_tp import sent_bytes
from plait.run.mesh import build_mesh
from plait.run.optim import build_optimizer
from plait.run.rank_setup import build_parts
from plait.run.train import TrainConfig, mean_over_dp
from plait.run.uneven import rank_rows
from plait.run.worker import train_step
from plait.workload.catalog import resolve_model


def train_both(plan_path: Path, chunks: int, steps: int) -> dict[str, object]:
    """``{"whole": [loss...], "chunked": [loss...], "messages": [...], "buffer_bytes": [...]}`` per step."""
    job, plan, _ = read_plan_parts(plan_path)
    spec = resolve_model(job.model)
    plan = plan.with_seq_len(spec.seq_len)
    assert plan.pp == 1, "one model part per rank here"
    out: dict[str, object] = {}
    for label, c in (("whole", 1), ("chunked", chunks)):
        run = replace(plan, overlap_chunks=c)
        config = TrainConfig(steps=steps)
        torch.manual_seed(config.seed)
        mesh = build_mesh(run)
        parts, _ = build_parts(mesh, spec, run, run.seq_len, config.seed, full_precision=True)
        params = [p for part in parts for p in part.parameters()]
        optimizer, scheduler = build_optimizer(params, mesh, config)
        losses, messages, sizes = [], [], []
        rows = slice(*rank_rows((), mesh.dp_rank, run.global_batch, run.dp))  # this replica's samples
        for step in range(steps):
            inputs, targets = (t[rows] for t in data.global_batch(step, run.global_batch, run.seq_len))
            before = sent_bytes(parts) or (0, 0)
            loss, _ = train_step(parts, None, mesh, run, params, optimizer, scheduler, config, inputs, targets,
                                 True, "cpu", step)
            after = sent_bytes(parts) or (0, 0)
            losses.append(mean_over_dp(loss, mesh))
            messages.append(after[0] - before[0])
            sizes.append(after[1] - before[1])
        out[label] = losses
        if c > 1:
            out["messages"], out["buffer_bytes"] = messages, sizes
    return out
