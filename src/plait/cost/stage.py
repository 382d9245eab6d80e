"""Per-micro-batch time of one pipeline stage, by component.

A stage runs its layers (:mod:`plait.cost.layer`), the embedding on the first stage
and the output projection plus loss on the last, and sends activations to its
neighbour once per model chunk and pass (with the scatter/gather optimisation the
message is ``b s h / t``: Narayanan et al. 2021, Sec. 4.1). ZeRO-3/FSDP gathers are
prefetched one layer ahead, so per layer only the part of the gather (and, in the
backward, gather plus reduce-scatter) longer than that layer's compute is exposed,
plus the first gather, which nothing hides (Zhao et al. 2023, "PyTorch FSDP", Sec. 3.3).
"""

from __future__ import annotations

from dataclasses import dataclass

from plait.cost import collectives as coll
from plait.cost.compute import elementwise_time_s, gemms_fwd_bwd_s
from plait.cost.flops import head_gemm
from plait.cost.layer import LayerCost, layer_cost
from plait.cost.memory import shard_groups
from plait.cost.params import layer_split, stage_layer_counts
from plait.cost.setup import Setup

COMPONENTS = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_p2p", "fsdp_comm")


@dataclass(frozen=True)
class StageCost:
    """Seconds of one micro-batch on one stage, per component and pass."""

    forward: dict[str, float]
    backward: dict[str, float]

    @property
    def forward_s(self) -> float:
        """Whole forward pass."""
        return sum(self.forward.values())

    @property
    def backward_s(self) -> float:
        """Whole backward pass (recomputation included)."""
        return sum(self.backward.values())

    @property
    def total_s(self) -> float:
        """Forward plus backward."""
        return self.forward_s + self.backward_s


def _fsdp_exposed(cost: LayerCost) -> tuple[float, float]:
    fwd = max(0.0, cost.fsdp_gather_s - cost.fwd_compute_s - cost.tp_fwd_s)
    bwd_work = cost.bwd_compute_s + cost.recompute_s + cost.tp_bwd_s
    bwd = max(0.0, cost.fsdp_gather_s + cost.fsdp_reduce_s - bwd_work)
    return fwd, bwd


def _add(total: dict[str, float], key: str, value: float) -> None:
    total[key] = total.get(key, 0.0) + value


def stage_cost(setup: Setup, stage: int) -> StageCost:
    """Per-micro-batch cost of pipeline stage ``stage``."""
    plan, model, acc = setup.plan, setup.model, setup.cluster.accelerator
    fwd = dict.fromkeys(COMPONENTS, 0.0)
    bwd = dict.fromkeys(COMPONENTS, 0.0)
    dense_group, expert_group = shard_groups(setup)
    counts = stage_layer_counts(setup, stage)
    first_gather = 0.0
    for moe_layer, count in zip((False, True), counts):
        if not count:
            continue
        dense_params, expert_params = layer_split(setup, moe_layer)
        params = dense_params + expert_params * dense_group / expert_group
        cost = layer_cost(setup, moe_layer, params, dense_group)
        fsdp_fwd, fsdp_bwd = _fsdp_exposed(cost)
        first_gather = first_gather or cost.fsdp_gather_s
        for key, f_val, b_val in (
            ("compute", cost.fwd_compute_s, cost.bwd_compute_s),
            ("recompute", 0.0, cost.recompute_s),
            ("tp_comm", cost.tp_fwd_s, cost.tp_bwd_s),
            ("cp_comm", cost.cp_fwd_s, cost.cp_bwd_s),
            ("ep_comm", cost.ep_fwd_s, cost.ep_bwd_s),
            ("fsdp_comm", fsdp_fwd, fsdp_bwd),
        ):
            _add(fwd, key, count * f_val)
            _add(bwd, key, count * b_val)
    _add(fwd, "fsdp_comm", first_gather)
    e, stream = setup.act_bytes, setup.tokens * model.hidden_size
    if stage == 0:
        _add(fwd, "compute", elementwise_time_s(2 * e * stream, acc))
        _add(bwd, "compute", elementwise_time_s(3 * e * stream, acc))
    if stage == plan.pp - 1:
        head_fwd, head_bwd = gemms_fwd_bwd_s([head_gemm(setup)], setup)
        logits = setup.tokens * model.vocab_size / plan.tp
        loss_bytes = logits * (e + 4 + 4)  # bf16 logits written, fp32 softmax read and written
        _add(fwd, "compute", head_fwd + elementwise_time_s(loss_bytes + 4 * e * stream, acc))
        _add(bwd, "compute", head_bwd + elementwise_time_s(loss_bytes + 4 * e * stream, acc))
    if plan.pp > 1:
        link = coll.group_link(setup.cluster, plan.pp, plan.tp * plan.cp * plan.dp)
        message = e * stream / plan.tp
        hop = plan.vpp * coll.p2p_s(message, link)
        _add(fwd, "pp_p2p", hop)
        _add(bwd, "pp_p2p", hop)
    return StageCost(fwd, bwd)
