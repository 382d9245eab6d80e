"""FSDP's per-layer seconds of a batch of plans (:mod:`plait.cost.batch`): each layer kind's parameter gather and
gradient reduce-scatter, their host-to-device copies with offloaded parameters, FSDP2's shard copies and the host
time of its per-layer hooks; one plan's kept by the fields they read, so the planner's many plans of one model cost
each distinct combination once.
"""

from __future__ import annotations

from operator import attrgetter

from plait.cost.compute import memory_bytes_per_s
from plait.cost.dataparallel import kept_gathered
from plait.cost.inner_values import ABSENT, Inner
from plait.cost.memory import param_bytes, shard_groups
from plait.cost.shard_calls import module_calls
from plait.cost.stage import ShardTimes
from plait.engine.facts import EngineFacts
from plait.hardware.cluster import Cluster
from plait.kept import Kept
from plait.plan.columns import PlanColumns
from plait.units import S_PER_US


def fsdp_layer_s(cluster: Cluster, cols: PlanColumns, inner: Inner,
                  framework: EngineFacts) -> tuple[ShardTimes, ShardTimes]:
    """Per-layer parameter gather and gradient reduce-scatter seconds (0 unless zero3 or offloaded), and the
    host time of FSDP2's per-layer hooks (zero2/zero3; measured by plait calibrate, 0 on GPUs).

    Per-module sharding gathers each parameter tensor on its own (tensors taken as equal-sized). With parameters
    offloaded, a gather first copies the rank's shard host-to-device over PCIe and then all-gathers it over the
    network as without offload; a reduce-scatter is followed by the copy of the gradient shard back to the host
    (FSDP2 ``CPUOffloadPolicy``: "sharded parameters ... copied host-to-device before all-gather", torch
    fully_shard docs; ZeRO-Infinity, Rajbhandari et al. 2021, Sec. 5: the same gathers, fed from host memory)."""
    xp = cols.xp
    dense_group, expert_group = shard_groups(cols)
    active = cols.is_("sharding", "zero3") & (dense_group > 1)  # gathered per micro-batch and layer
    active = active & xp.not_(kept_gathered(cols, framework.pipeline_keeps_gathered))  # or once per step
    wrapped = (cols.is_("sharding", "zero3") | cols.is_("sharding", "zero2")) & (dense_group > 1)  # FSDP2 units
    eff = cluster.accelerator.efficiency
    pcie = cluster.accelerator.pcie_bandwidth_gb_per_s * 1e9
    memory_bw = memory_bytes_per_s(cluster.accelerator)
    out = []
    for kind in inner.kinds:
        if kind is ABSENT:  # a kind the model lacks (one plan): nothing to gather, reduce or hook
            out.append(ShardTimes(gather_s=0.0, reduce_s=0.0, host_fwd_s=0.0, host_bwd_s=0.0))
            continue
        params = kind.num_params + kind.num_expert_params * dense_group / expert_group
        gather, reduce = module_calls(cluster, cols, kind, framework, active, inner.grad_bytes, params)
        shard = params / dense_group
        present = kind.num_params + kind.num_expert_params > 0
        copied = xp.where(active, params, 0.0) if framework.shard_copies else 0.0  # EngineFacts.shard_copies
        copy_out = 2.0 * param_bytes(cols) * copied / memory_bw  # the gathered buffer read, the parameters written
        copy_in = (param_bytes(cols) + inner.grad_bytes) * copied / memory_bw  # gradients read, the buffer written
        out.append(ShardTimes(
            gather_s=gather + xp.where(cols["offload_params"], param_bytes(cols) * shard / pcie, 0.0),
            reduce_s=reduce + xp.where(cols["offload_params"], inner.grad_bytes * shard / pcie, 0.0),
            host_fwd_s=xp.where(wrapped & present, eff.host_fsdp_layer_fwd_us.value * S_PER_US, 0.0),
            host_bwd_s=xp.where(wrapped & present, eff.host_fsdp_layer_bwd_us.value * S_PER_US, 0.0),
            copy_out_s=copy_out, copy_in_s=copy_in))
    return out[0], out[1]


FSDP_FIELDS = ("sharding", "dp_shard", "cp", "ep", "tp", "offload_params", "precision")
"""The plan fields :func:`fsdp_layer_s` reads, with ``pp > 1`` (:func:`shard_groups`, :func:`kept_gathered`,
:func:`param_bytes` and its own)."""
_FSDP_VALUES = attrgetter(*FSDP_FIELDS)
_FSDP_KEPT: Kept[tuple[ShardTimes, ShardTimes]] = Kept(256)


def _fsdp_one(cluster: Cluster, cols: PlanColumns, inner: Inner,
              framework: EngineFacts) -> tuple[ShardTimes, ShardTimes]:
    """:func:`fsdp_layer_s` of one plan, kept for the last 256 by its :data:`FSDP_FIELDS`, ``pp > 1`` and the
    identity of its per-layer quantities (kept themselves, :func:`plait.cost.inner.inner_columns`), cluster and cost
    facts, which the entry holds (frozen: the same object is the same value, its id not reused while it lives)."""
    plan = cols.single
    assert plan is not None, "one plan's columns"
    key = (id(inner), id(cluster), id(framework), plan.pp > 1, *_FSDP_VALUES(plan))
    return _FSDP_KEPT.get(key, (inner, cluster, framework), lambda: fsdp_layer_s(cluster, cols, inner, framework))


def fsdp_layer_times(cluster: Cluster, cols: PlanColumns, inner: Inner,
                     framework: EngineFacts) -> tuple[ShardTimes, ShardTimes]:
    """:func:`fsdp_layer_s` of every plan of ``cols``; of one plan, kept (:func:`_fsdp_one`)."""
    if cols.single is None:
        return fsdp_layer_s(cluster, cols, inner, framework)
    return _fsdp_one(cluster, cols, inner, framework)
