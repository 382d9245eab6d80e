"""2D sparse parallelism (000-09: Zhang et al., arXiv 2508.03854) run by TorchRec's own ``DMPCollection`` on CPU
ranks (gloo).

TorchRec's ``DMPCollection`` (torchrec/distributed/model_parallel.py @1.8.0) shards the tables within each group of
``g`` ranks by a plan made for ``g`` ranks, the ``W / g`` groups holding the same shards, and its ``sync()``
averages every fused embedding kernel's weights and optimizer states across the replicas (``allreduce_coalesced``,
``ReduceOp.AVG`` on its replica group). With the groups strided (its default: group ``j`` holds ranks ``j, j + W/g,
...``), rank ``k`` is rank ``k // (W/g)`` of group ``k % (W/g)``.

It is written for CUDA and MTIA only, in two places, both bypassed here and nothing else changed (each checked by
tests/test_dlrm_2d.py's parity with one process):

- ``__init__`` asserts ``device.type in ("cuda", "mtia")`` ("DMPCollection only supports CUDA or MTIA"): the
  collection is given a CUDA device for that check only; its ``_device`` reads back as the CPU, and the CPU is what
  reaches ``DistributedModelParallel.__init__`` (:class:`_OnCpu`, placed after ``DMPCollection`` in the method
  order so that its ``super().__init__`` lands there).
- ``_remap_sharding_plan`` names each shard's placement ``rank:N/{device}:{N mod local size}``; a CPU tensor's device
  is ``cpu``, never ``cpu:1``, and torch's ``ShardedTensor`` refuses the mismatch ("Local shard tensor device does
  not match with local Shard's placement"): the placements are renamed ``rank:N/cpu`` after the remap.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def group_rank(rank: int, world: int, group: int) -> int:
    """Rank ``rank``'s index within its sharding group of ``group`` (``DMPCollection``'s strided groups)."""
    return rank // (world // group)


def collection(module: Any, plan: Any, group: int, sharders: list[Any]) -> Any:
    """``module`` sharded by TorchRec's ``DMPCollection`` within groups of ``group`` ranks on the CPU; ``plan``:
    TorchRec's plan for ``group`` ranks (module docstring)."""
    from torch.distributed.remote_device import _remote_device
    from torchrec.distributed.model_parallel import DistributedModelParallel, DMPCollection

    class _OnCpu(DistributedModelParallel):
        def __init__(self, module: Any, env: Any, device: Any, *rest: Any) -> None:
            super().__init__(module, env, torch.device("cpu"), *rest)

    class _CpuCollection(DMPCollection, _OnCpu):  # type: ignore[misc]
        _device = property(lambda self: torch.device("cpu"), lambda self, value: None)

        def _remap_sharding_plan(self, plan: Any, *args: Any, **kwargs: Any) -> None:
            super()._remap_sharding_plan(plan, *args, **kwargs)
            for module_plan in plan.plan.values():
                for sharding in module_plan.values():
                    for shard in getattr(sharding.sharding_spec, "shards", None) or []:
                        shard.placement = _remote_device(f"rank:{shard.placement.rank()}/cpu")

    return _CpuCollection(module=module, device=torch.device("cuda"), plan=plan, world_size=dist.get_world_size(),
                          sharding_group_size=group, global_pg=dist.group.WORLD, sharders=sharders)


def counted_sync(model: Any, counts: dict[str, int]) -> None:
    """Make ``model.sync()`` add the bytes it all-reduces across the replicas to ``counts["replica_sync"]`` (the
    payload each rank contributes, as the cost model prices it), then run TorchRec's own all-reduce."""
    replicas = model._default_ctx.replica_pg
    opts = dist.AllreduceCoalescedOptions()
    opts.reduceOp = dist.ReduceOp.AVG  # DMPCollection._sync's own options

    def all_reduce(tensors: list[torch.Tensor]) -> None:
        counts["replica_sync"] += sum(t.numel() * t.element_size() for t in tensors)
        replicas.allreduce_coalesced(tensors, opts=opts).wait()

    model.set_all_reduce_hook(all_reduce)
