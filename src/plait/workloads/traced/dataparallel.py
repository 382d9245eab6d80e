"""The data-parallel seconds of a traced workload's plan (:func:`plait.workloads.traced.cost.estimate_traced`).

- **DDP.** Unsharded replicas reduce gradients in DDP's buckets (``bucket_cap_mb``, 25 MB by default) filled in the
  order the trace saw gradients complete; a bucket's all-reduce starts when its last gradient is ready and after
  the previous bucket's, and what ends after the last micro-batch's backward is exposed (Li et al., "PyTorch
  Distributed", VLDB 2020, Sec. 3.2.3 and 4.2). With tensor parallelism (``tp x dp``) each rank's DDP reduces its
  own shard of the pairs' weights (:func:`plait.workloads.traced.tensor_parallel.rank_elements`) over the ranks
  holding the same shard, ``tp`` ranks apart (the TP group's ranks are adjacent, as Megatron-LM orders them:
  Narayanan et al., SC 2021, Sec. 3.3).
- **Horovod.** Gradients all-reduced in fused batches once per Horovod cycle (:mod:`.tensor_fusion`), in the
  same completion order.
- **ZeRO.** ZeRO-1/2 reduce-scatter and all-gather once per step; ZeRO-3 gathers each unit's parameters before its
  forward and its backward and reduce-scatters its gradients after it, one unit ahead (Zhao et al., "PyTorch FSDP",
  VLDB 2023, Sec. 3.3), and FSDP2's hooks run on the host around each wrapped module.
- **Other ``dp_sync`` methods** are costed on the traced parameter tensors by :func:`plait.cost.sync.method_costs`.
"""

from __future__ import annotations

from plait.cost.dataparallel import exposed_sync_s, gradient_sync_s
from plait.cost.links import collective_s
from plait.cost.memory import param_bytes
from plait.cost.sync import method_costs
from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns
from plait.plan.plan import Plan
from plait.workloads.traced.flat_reduce import FlatReduce
from plait.workloads.traced.model import TracedWorkload
from plait.workloads.traced.tensor_fusion import TensorFusion
from plait.workloads.traced.tensor_parallel import rank_elements

DDP_BUCKET_MB = 25.0
"""PyTorch DDP's default ``bucket_cap_mb`` (torch/nn/parallel/distributed.py), where the engine states none."""


def fsdp_hooks_s(cluster: Cluster, plan: Plan, work: TracedWorkload, group: list[int], recomputed: list[bool]) -> float:
    """FSDP2's host work per micro-batch on a stage, in line with its compute: the hooks around each wrapped
    module's forward and backward, the stage's root included (the repeated units and the root are what
    ``fully_shard`` wraps: :mod:`plait.workloads.traced.worker`), at the accelerator's ``host_fsdp_layer_fwd_us`` and
    ``host_fsdp_layer_bwd_us`` per module, as :func:`plait.cost.batch` charges a transformer layer; a recomputed unit
    runs its forward hooks again."""
    if plan.sharding not in ("zero2", "zero3") or plan.dp <= 1:
        return 0.0
    eff = cluster.accelerator.efficiency
    units = [i for i in group if 0 < i < len(work.units) - 1]
    forward_s, backward_s = eff.host_fsdp_layer_fwd_us.value * 1e-6, eff.host_fsdp_layer_bwd_us.value * 1e-6
    return (len(units) + 1) * (forward_s + backward_s) + sum(recomputed[i] for i in units) * forward_s


def fsdp_exposed_s(cluster: Cluster, plan: Plan, work: TracedWorkload, group: list[int],
                    seconds: list[tuple[float, float]], grad_bytes: float) -> float:
    """ZeRO-3 seconds on the critical path per micro-batch: each unit's gather hidden behind the previous unit's
    compute, its reduce-scatter behind the next (module docstring)."""
    if plan.sharding != "zero3" or plan.dp_shard <= 1:
        return 0.0
    exposed = 0.0
    for i in group:
        count = work.units[i].num_params
        gather = float(collective_s(cluster, "all_gather", plan.dp_shard, 1, float(param_bytes(PlanColumns.one(plan))) * count))
        reduce = float(collective_s(cluster, "reduce_scatter", plan.dp_shard, 1, grad_bytes * count))
        exposed += max(0.0, gather - seconds[i][0]) + max(0.0, gather + reduce - seconds[i][1])
    return exposed


def dp_comm_s(cluster: Cluster, plan: Plan, cols: PlanColumns, work: TracedWorkload, group: list[int],
               seconds: list[tuple[float, float]], params: dict[str, float], named: list[tuple[str, tuple[int, ...]]],
               grad_bytes: float, last_backward: float, first_forward: float, busy: float,
               flat: FlatReduce | None = None, fusion: TensorFusion | None = None) -> tuple[float, float]:
    """(exposed data-parallel seconds per step, extra memory bytes of the synchronization method); ``flat``: the
    replicas reduce in one flat all-reduce after the backward instead (:mod:`.flat_reduce`); ``fusion``: in
    Horovod's fused batches, once per cycle (:mod:`.tensor_fusion`)."""
    if plan.dp <= 1:
        return 0.0, 0.0
    if flat is not None:
        return flat.exposed_s(cluster, plan, sum(params.values())), 0.0
    if fusion is not None:
        return fusion.exposed_s(cluster, plan, *gradients_ready(plan, work, group, seconds, grad_bytes)), 0.0
    reduce, gather = (float(x) for x in gradient_sync_s(cluster, cols, params, grad_bytes))
    shown = extra = 0.0
    if not plan.dp_sync.is_allreduce:
        sync = plan.dp_sync
        over, shown, extra = (float(x) for x in method_costs(None, cluster, sync, cols, params, 0, busy, named))
        if sync.pipelined:
            reduce = 0.0
        elif not sync.infrequent:
            reduce = over
    elif plan.sharding == "none":
        return ddp_buckets_s(cluster, plan, work, group, seconds, grad_bytes), 0.0
    exposed = float(exposed_sync_s(cols, reduce, gather, last_backward, first_forward, len(group)))
    return exposed + shown, extra


def gradients_ready(plan: Plan, work: TracedWorkload, group: list[int], seconds: list[tuple[float, float]],
                    grad_bytes: float) -> tuple[list[tuple[float, float]], float]:
    """(seconds after the backward starts at which each gradient a rank reduces is ready, its bytes) in the order
    the trace saw gradients complete, and the backward's end: a gradient is ready as its unit's backward ends
    (units run backward last to first), a TP rank holding its shard of the pairs' weights with ``tp > 1``."""
    split = rank_elements(work, plan.tp)
    held = {name: (i, split(name, shape)) for i in group for name, shape in work.units[i].params}
    done, clock = {}, 0.0
    for i in reversed(group):
        clock += seconds[i][1]
        done[i] = clock
    ready, latest = [], 0.0
    for name in (n for n in work.grad_order if n in held):
        unit, count = held[name]
        latest = max(latest, done[unit])
        ready.append((latest, grad_bytes * count))
    return ready, clock


def ddp_buckets_s(cluster: Cluster, plan: Plan, work: TracedWorkload, group: list[int],
                   seconds: list[tuple[float, float]], grad_bytes: float) -> float:
    """Seconds DDP's bucketed all-reduce runs past the last backward (module docstring): buckets of
    ``bucket_cap_mb`` filled in the order gradients are ready (:func:`gradients_ready`)."""
    ready_grads, clock = gradients_ready(plan, work, group, seconds, grad_bytes)
    cap = DDP_BUCKET_MB * 2**20
    buckets: list[tuple[float, float]] = []  # (ready, bytes)
    filled = ready = 0.0
    for ready_s, size in ready_grads:
        filled += size
        ready = max(ready, ready_s)
        if filled >= cap:
            buckets.append((ready, filled))
            filled = 0.0
    if filled:
        buckets.append((ready, filled))
    end = 0.0
    for ready_s, size in buckets:
        end = max(end, ready_s) + float(collective_s(cluster, "all_reduce", plan.dp, plan.tp, size))
    return max(0.0, end - clock)


def ddp_bytes(work: TracedWorkload, plan: Plan, group: list[int], grad_bytes: float) -> float:
    """Bytes one rank's DDP hands to its all-reduces per step on a stage holding the units ``group``: every gradient
    once (DDP reduces after the last micro-batch only), a TP rank's shard of the pairs' weights
    (:func:`plait.workloads.traced.tensor_parallel.rank_elements`); 0 without replicas."""
    if plan.dp <= 1:
        return 0.0
    split = rank_elements(work, plan.tp)
    return grad_bytes * sum(split(name, shape) for i in group for name, shape in work.units[i].params)
