"""Part of one rank of tests/test_sites_runtime.py (run from tests/sites_ranks.py): ``site_topk``'s and
``site_quantize``'s communication hook (:func:`plait.run.replica_grads.comm_hook`, as DDP and :class:`~plait.run.replica_grads.LocalGradients` call it)
on 4 gloo ranks laid out as two sites of 2 and as four sites of 1, against the mean gradient that one all-reduce over
every rank gives, with the bytes each tier's group was handed counted separately. (DDP's own path: the ``trained``
fixture's ``site_topk`` case; constructing DDP here would add seconds of waiting to the spawn.)"""

from __future__ import annotations

import torch
import torch.distributed as dist

from plait.run.counting import counted_bytes
from plait.run.replica_grads import LocalBucket, comm_hook
from plait.run.sites import SiteReducer, build_reducer
from plait.sync import parse

STEPS = 2
"""Steps of each case: the second carries the first's error-feedback residual."""


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))  # 58 parameters


def _grads(rank: int, reduce, groups: tuple) -> tuple[list[list[float]], list]:  # type: ignore[no-untyped-def, type-arg]
    """Each step's mean gradient (``reduce`` of the bucket) and the bytes counted on each group of ``groups``."""
    module = _model()
    out, counted = [], []
    for step in range(STEPS):
        torch.manual_seed(100 * step + rank)
        module.zero_grad()
        module(torch.randn(4, 7)).pow(2).sum().backward()
        bucket = LocalBucket(list(module.parameters()))
        tallies = [counted_bytes(g) for g in groups]
        totals = [t.__enter__() for t in tallies]
        mean = reduce(bucket)
        for t in reversed(tallies):
            t.__exit__(None, None, None)
        out.append(mean.tolist())
        counted.append([t[0] for t in totals])
    return out, counted


def _all_reduced(bucket: LocalBucket) -> torch.Tensor:
    flat = bucket.buffer().clone()
    dist.all_reduce(flat)
    return flat / dist.get_world_size()


def site_topk_found(rank: int) -> dict[str, object]:
    """Each case's per-step mean gradients and per-tier bytes, and the all-reduce's ``reference`` gradients."""
    found: dict[str, object] = {"reference": _grads(rank, _all_reduced, ())[0]}
    for site_gpus, specs in ((2, ("site_topk:ratio=1", "site_topk:ratio=0.25", "site_quantize:bits=32",
                                  "site_quantize:bits=4")),
                             (1, ("site_topk:ratio=0.25", "site_quantize:bits=8"))):
        replicas = build_reducer(dist.group.WORLD, site_gpus)  # type: ignore[arg-type]
        assert isinstance(replicas, SiteReducer)
        for spec in specs:
            state, hook = comm_hook(parse(spec), replicas)
            grads, counted = _grads(rank, lambda b: hook(state, b).wait(), (replicas.inside, replicas.across))
            found[f"{site_gpus}:{spec}"] = {"grads": grads, "counted": counted}
    return found
