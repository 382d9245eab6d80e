"""The DeviceMesh of a plan, with named axes (pp, dp_replicate, dp_shard, cp, tp), tp fastest.

The layout matches the estimator's rank order (:mod:`plait.plan.plan`): consecutive ranks
form TP groups, so on a GPU node TP stays on NVLink.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from plait.errors import ConfigError
from plait.plan.plan import Plan
from plait.run.lss import Lss
from plait.run.ring_attention import Ring, head_tail
from plait.run.sites import Reducer, build_reducer
from plait.run.ulysses import Ulysses

AXES = ("pp", "dp_replicate", "dp_shard", "cp", "tp")


@dataclass(frozen=True)
class Mesh:
    """The world mesh and this rank's coordinates."""

    mesh: DeviceMesh
    plan: Plan
    site_gpus: int | None = None
    """GPUs of one site where the cluster spans sites (:meth:`plait.hardware.cluster.Cluster.site_gpus`): the
    replicas' all-reduce is then hierarchical (:mod:`plait.run.sites`); ``None``: one site."""

    def coordinate(self, axis: str) -> int:
        """This rank's index along ``axis``."""
        return self.mesh.get_local_rank(axis)

    @property
    def dp_rank(self) -> int:
        """Index among data-parallel replicas (replicate-major, like the rank layout)."""
        return self.coordinate("dp_replicate") * self.plan.dp_shard + self.coordinate("dp_shard")

    @property
    def is_first_stage_rank(self) -> bool:
        return self.coordinate("pp") == 0

    @property
    def is_last_stage_rank(self) -> bool:
        return self.coordinate("pp") == self.plan.pp - 1

    def sub(self, *axes: str) -> DeviceMesh:
        """The sub-mesh over ``axes``."""
        return self.mesh[axes if len(axes) > 1 else axes[0]]

    @cached_property
    def replicas(self) -> Reducer:
        """The sum all-reduce over this rank's data-parallel replicas (:func:`plait.run.parallel.replica_group`),
        hierarchical across sites. Built once, on first use, by every rank (group creation is collective)."""
        from plait.run.parallel import replica_group  # plait.run.parallel builds on this module

        if self.plan.cp > 1 and not self.plan.dp_sync.is_allreduce:  # the method runs across replicas only: the
            # cp ranks of one replica average their gradients first (plait.run.context.average_over_cp)
            return build_reducer(self.mesh["dp_replicate", "dp_shard"]._flatten("dp").get_group(), self.site_gpus)
        return build_reducer(replica_group(self), self.site_gpus)

    @cached_property
    def cp_attention(self) -> Ring | Ulysses | Lss:
        """plait's own context-parallel attention over this rank's cp group (:mod:`plait.run.context`), with the
        bytes it has sent: the ring, the all-to-all or LSS' fused all-gather, as the plan's ``cp_attention`` says.
        Built once, on first use."""
        group = self.sub("cp").get_group()
        if self.plan.cp_attention == "lss":
            return Lss(group, torch.stack([head_tail(self.plan.seq_len, self.plan.cp, r) for r in range(self.plan.cp)]))
        return Ulysses(group) if self.plan.cp_attention == "ulysses" else Ring(group)

    @cached_property
    def expert(self) -> DeviceMesh:
        """The ``(edp, ep)`` mesh over this rank's data-parallel ranks, for MoE with ``ep > 1``: ``ep``
        consecutive dp ranks (in :attr:`dp_rank` order) hold different experts and ``edp = dp / ep``
        of them hold the same ones (Megatron-Core's expert-data-parallel group; torchtitan's efsdp x ep).
        Built once, on first use, by every rank (group creation is collective)."""
        dp_mesh = self.mesh["dp_replicate", "dp_shard"]._flatten("dp")
        return dp_mesh._unflatten(0, (self.plan.dp // self.plan.ep, self.plan.ep), ("edp", "ep"))


def device_type() -> str:
    """``cuda`` when GPUs are visible, else ``cpu`` (gloo)."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def build_mesh(plan: Plan, site_gpus: int | None = None) -> Mesh:
    """Initialise the world mesh; the process group must already be up. ``site_gpus``: :attr:`Mesh.site_gpus`."""
    world = dist.get_world_size()
    if world != plan.num_gpus:
        raise ConfigError(f"the plan needs pp*dp*cp*tp={plan.num_gpus} processes but {world} were started")
    shape = tuple(getattr(plan, axis) for axis in AXES)
    return Mesh(init_device_mesh(device_type(), shape, mesh_dim_names=AXES), plan, site_gpus)
