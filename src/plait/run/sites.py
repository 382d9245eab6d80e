"""The replicas' sum all-reduce: flat on one site, hierarchical where the replica group spans sites.

A flat ring all-reduce over ``g = S m`` ranks, ``m`` in each of ``S`` sites, carries ``2 (g-1)/g`` of the buffer over
each ring edge, and the edges between sites are the wide-area link (gloo and NCCL alike build one ring over the
group). The hierarchical schedule sends only ``2 (S-1)/S`` of it across (Jia et al. 2018, arXiv 1807.11205, Sec.
4.3, the 2D all-reduce; Horovod's ``HOROVOD_HIERARCHICAL_ALLREDUCE``): reduce-scatter inside each site, the ``m``
shards all-reduced with the ranks at the same position in the other sites (``m`` independent rings, in parallel),
all-gather inside each site. :func:`plait.cost.collectives.all_reduce_s` costs this schedule; measured by
``benchmarks/low_comm.py``: a bare gloo all-reduce of 13.1 MB between two namespaces at 200 Mbit/s took 0.55 s
with 1 rank per site and 0.76-0.80 s with 2 per site, flat (2026-12-02).

Every collective here is a ``torch.distributed`` one. The three steps of a hierarchical all-reduce run in order on
one background thread, on groups no other code uses, so that an asynchronous all-reduce (DDP's bucket hooks,
Pipe-SGD, DreamDDP) overlaps compute as a single gloo/NCCL collective would, and every rank issues the steps in
the same order (the order its all-reduces were started in). The steps call c10d's functions by their home module
(the same functions ``torch.distributed`` exports), so that :func:`plait.run.counting.counted_bytes` counts a
hierarchical all-reduce's payload once, at :meth:`SiteReducer.all_reduce`.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from plait.hardware.catalog import resolve_cluster
from plait.hardware.mixed_catalog import mixed_cluster


class Reducer:
    """Sum all-reduce over the replica group ``group`` (``None``: the default group), flat."""

    def __init__(self, group: dist.ProcessGroup | None = None) -> None:
        self.group = group

    @property
    def groups(self) -> tuple[dist.ProcessGroup | None, ...]:
        """Every process group the replicas' synchronization may call collectives on."""
        return (self.group,)

    @property
    def size(self) -> int:
        """Ranks in the replica group."""
        return dist.get_world_size(self.group)

    def all_reduce(self, flat: torch.Tensor) -> torch.futures.Future[list[torch.Tensor]]:
        """Start summing ``flat`` in place over the replica group; the future's value is ``[flat]``."""
        return dist.all_reduce(flat, group=self.group, async_op=True).get_future()  # type: ignore[union-attr]


class SiteReducer(Reducer):
    """:class:`Reducer` whose all-reduce is hierarchical: reduce-scatter over ``inside`` (this rank's replicas in
    its site), all-reduce of the shard over ``across`` (the replicas at its position in every site), all-gather
    over ``inside``."""

    def __init__(self, group: dist.ProcessGroup, inside: dist.ProcessGroup, across: dist.ProcessGroup) -> None:
        super().__init__(group)
        self.inside, self.across = inside, across
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="plait-sites")

    @property
    def groups(self) -> tuple[dist.ProcessGroup | None, ...]:
        """The replica group and its site groups (a method that compresses per tier calls collectives on them)."""
        return (self.group, self.inside, self.across)

    def all_reduce(self, flat: torch.Tensor) -> torch.futures.Future[list[torch.Tensor]]:
        done: torch.futures.Future[list[torch.Tensor]] = torch.futures.Future()

        def run() -> None:
            try:
                self._hierarchical(flat)
                done.set_result([flat])
            except Exception as exc:  # noqa: BLE001  the waiter raises it
                done.set_exception(exc)

        self.worker.submit(run)
        return done

    def _hierarchical(self, flat: torch.Tensor) -> None:
        m = dist.get_world_size(self.inside)
        if m == 1:  # one replica in each site: the shard is the whole buffer
            c10d.all_reduce(flat, group=self.across)
            return
        padded = flat.reshape(-1) if flat.numel() % m == 0 else torch.nn.functional.pad(flat.reshape(-1),
                                                                                         (0, -flat.numel() % m))
        shard = torch.empty(padded.numel() // m, dtype=flat.dtype, device=flat.device)
        c10d.reduce_scatter_tensor(shard, padded, group=self.inside)
        c10d.all_reduce(shard, group=self.across)
        c10d.all_gather_into_tensor(padded, shard, group=self.inside)
        if padded.data_ptr() != flat.data_ptr():
            flat.copy_(padded[:flat.numel()].view_as(flat))


def named_site_gpus(cluster: str) -> int | None:
    """GPUs of one site of ``cluster``, a preset or file (``None``: no cluster named, or one site; a mixed cluster's
    groups share one fabric, its join)."""
    if not cluster or mixed_cluster(cluster) is not None:
        return None

    return resolve_cluster(cluster).site_gpus


def site_partition(ranks: list[int], site_gpus: int) -> list[list[int]] | None:
    """The replica group ``ranks`` (global ranks) split by site, ``site_gpus`` consecutive ranks a site, each part
    in rank order; ``None`` where the group lies in one site or its sites hold unequal numbers of its ranks (then
    it all-reduces flat)."""
    parts: dict[int, list[int]] = {}
    for rank in sorted(ranks):
        parts.setdefault(rank // site_gpus, []).append(rank)
    sizes = {len(p) for p in parts.values()}
    if len(parts) < 2 or len(sizes) != 1:
        return None
    return list(parts.values())


def build_reducer(group: dist.ProcessGroup, site_gpus: int | None) -> Reducer:
    """The reducer of this rank's replica group ``group``: hierarchical where ``site_gpus`` (GPUs of one site,
    :meth:`plait.hardware.cluster.Cluster.site_gpus`) splits it over several sites equally. Collective over the
    world: every rank learns every replica group and creates every site group in the same order."""
    if not site_gpus:
        return Reducer(group)
    mine = dist.get_process_group_ranks(group)
    every: list[list[int] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    groups = sorted({tuple(ranks) for ranks in every if ranks is not None})
    insides, acrosses = [], []
    for ranks in groups:
        sites = site_partition(list(ranks), site_gpus)
        if sites is not None:
            insides += sites
            acrosses += [list(position) for position in zip(*sites)]
    if site_partition(mine, site_gpus) is None:
        _create_all(insides, acrosses)  # collective: this rank takes part in creating the others' groups
        return Reducer(group)
    inside, across = _create_all(insides, acrosses)
    return SiteReducer(group, inside, across)  # type: ignore[arg-type]


def _create_all(insides: list[list[int]], acrosses: list[list[int]]) -> tuple[dist.ProcessGroup | None, ...]:
    """Create the site groups (all ranks, same order); this rank's inside and across groups."""
    inside, _ = dist.new_subgroups_by_enumeration(insides) if insides else (None, None)
    across, _ = dist.new_subgroups_by_enumeration(acrosses) if acrosses else (None, None)
    return inside, across
