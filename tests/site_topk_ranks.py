"""Part of one rank of tests/test_sites_runtime.py (run from tests/sites_ranks.py): DDP with the ``site_topk`` hook on
4 gloo ranks laid out as two sites of 2 and as four sites of 1, against DDP's own all-reduce, with the bytes each
tier's group was handed counted separately."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from plait.run.counting import counted_bytes
from plait.run.sites import SiteReducer, build_reducer
from plait.run.sync import ONE_BUCKET_MB, wrap_model
from plait.sync import parse


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))  # 58 parameters


def _grads(module: torch.nn.Module, rank: int, steps: int, groups: tuple) -> tuple[list[list[float]], list]:  # type: ignore[type-arg]
    """Each step's mean gradient and the bytes counted on each group of ``groups``."""
    out, counted = [], []
    for step in range(steps):
        torch.manual_seed(100 * step + rank)
        module.zero_grad()
        tallies = [counted_bytes(g) for g in groups]
        totals = [t.__enter__() for t in tallies]
        module(torch.randn(4, 7)).pow(2).sum().backward()
        for t in reversed(tallies):
            t.__exit__(None, None, None)
        out.append(torch.cat([p.grad.reshape(-1) for p in module.parameters()]).tolist())
        counted.append([t[0] for t in totals])
    return out, counted


def site_topk_found(rank: int) -> dict[str, object]:
    """Each case's per-step mean gradients and per-tier bytes, and DDP's own ``reference`` gradients."""
    found: dict[str, object] = {}
    reference, _ = _grads(DistributedDataParallel(_model(), bucket_cap_mb=ONE_BUCKET_MB), rank, 3, ())
    found["reference"] = reference
    for site_gpus in (2, 1):
        replicas = build_reducer(dist.group.WORLD, site_gpus)  # type: ignore[arg-type]
        assert isinstance(replicas, SiteReducer)
        for ratio in ("1", "0.25"):
            module = wrap_model(_model(), parse(f"site_topk:ratio={ratio}"), replicas)
            grads, counted = _grads(module, rank, 3, (replicas.inside, replicas.across))
            found[f"{site_gpus}:{ratio}"] = {"grads": grads, "counted": counted}
    return found
