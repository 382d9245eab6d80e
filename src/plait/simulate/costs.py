"""Per-rank operation durations for the simulator, from the same cost functions the estimator uses."""

from __future__ import annotations

import numpy as np

from plait.cost.batch import stage_passes
from plait.cost.dataparallel import gradient_sync_s, optimizer_step_s
from plait.cost.framework import DEFAULT, Framework
from plait.cost.memory import stage_params
from plait.cost.params import stage_layer_counts
from plait.hardware.cluster import Cluster
from plait.plan.plan import Plan
from plait.simulate.pipeline import PipelineCosts
from plait.workload.model import ModelSpec


def pipeline_costs(model: ModelSpec, cluster: Cluster, plan: Plan, framework: Framework = DEFAULT) -> PipelineCosts:
    """Durations of every rank of one pipeline of ``plan``."""
    plan = plan.with_seq_len(model.seq_len)
    stages = np.arange(plan.pp)
    cols, inner, passes, p2p = stage_passes(model, cluster, plan, stages, framework)
    fwd, bwd = passes
    v = plan.vpp
    forward = sum(fwd.values()) / v
    backward = sum(bwd.values()) / v
    weight = bwd["compute"] / (2 * v)  # weight-gradient GEMMs: half of the backward GEMM work (Qi et al. 2023)
    params = stage_params(model, cols, inner, stages)
    reduce, gather = gradient_sync_s(cluster, cols, params, inner.grad_bytes)
    dense, moe = stage_layer_counts(model, cols["pp"], stages)
    return PipelineCosts(
        p=plan.pp, m=plan.num_micro_batches, v=v, schedule=plan.schedule if plan.pp > 1 else "1f1b",
        forward_s=forward.tolist(), backward_s=backward.tolist(), weight_grad_s=weight.tolist(),
        p2p_s=float(p2p[0]), grad_reduce_s=reduce.tolist(), param_gather_s=gather.tolist(),
        buckets=(dense + moe).tolist(), overlap_grad_reduce=plan.overlap_grad_reduce,
        optimizer_s=optimizer_step_s(cluster, cols, params, inner.grad_bytes).tolist(),
    )
