"""Per-rank, per-layer quantities that depend only on the "inner" knobs of a plan.

Layer time, in-layer collectives, activation bytes and per-rank parameter counts depend
on (tp, sp, cp, ep, micro-batch, sequence, precision, recompute, gradient dtype, TP
overlap) but not on pp, dp, sharding or the schedule. The planner's candidates share few
inner combinations, so each is computed once with the scalar functions of
:mod:`plait.cost.layer`, :mod:`plait.cost.activations` and :mod:`plait.cost.params` and
broadcast to every candidate that has it.
"""

from __future__ import annotations

import numpy as np

from plait.cost import activations as act
from plait.cost.compute import elementwise_time_s, gemms_fwd_bwd_s
from plait.cost.flops import head_gemm
from plait.cost.framework import Framework
from plait.cost.layer import edge_tp_s, layer_cost
from plait.cost.params import layer_split
from plait.cost.setup import Setup
from plait.hardware.cluster import Cluster
from plait.plan.columns import PlanColumns
from plait.workload.model import ModelSpec

INNER_FIELDS = ("tp", "sp", "cp", "ep", "micro_batch", "seq_len", "precision", "recompute", "grad_reduce_dtype",
                "tp_comm_overlap")


def _row(setup: Setup) -> dict[str, float]:
    """Every inner quantity of one combination, as floats."""
    model, plan, acc = setup.model, setup.plan, setup.cluster.accelerator
    out: dict[str, float] = {}
    for tag, moe_layer in (("d", False), ("m", True)):
        if moe_layer and not model.moe:
            cost = None
        else:
            cost = layer_cost(setup, moe_layer)
        names = ("fwd", "bwd", "rc", "tp_fwd", "tp_bwd", "cp_fwd", "cp_bwd", "ep_fwd", "ep_bwd")
        values = (cost.fwd_compute_s, cost.bwd_compute_s, cost.recompute_s, cost.tp_fwd_s, cost.tp_bwd_s,
                  cost.cp_fwd_s, cost.cp_bwd_s, cost.ep_fwd_s, cost.ep_bwd_s) if cost else (0.0,) * len(names)
        out.update({f"{n}_{tag}": v for n, v in zip(names, values)})
        real = cost is not None
        out[f"act_full_{tag}"] = act.layer_bytes(setup, moe_layer) if real else 0.0
        out[f"act_sel_{tag}"] = act.layer_bytes_selective(setup, moe_layer) if real else 0.0
        dense, expert = layer_split(setup, moe_layer) if real else (0.0, 0.0)
        out[f"params_{tag}"], out[f"params_expert_{tag}"] = dense, expert
        out[f"tensors_{tag}"] = float(model.layer_tensor_count(moe_layer)) if real else 1.0
    out["act_input"] = act.layer_input_bytes(setup)
    out["act_first"] = act.first_stage_extra_bytes(setup)
    out["act_last"] = act.last_stage_extra_bytes(setup)
    e, r, stream = setup.act_bytes, setup.residual_bytes, setup.tokens * model.hidden_size
    out["first_fwd"] = elementwise_time_s(2 * r * stream, acc)  # embedding lookup writes the hidden states
    out["first_bwd"] = elementwise_time_s(3 * r * stream, acc)  # and scatters their gradient back
    head_fwd, head_bwd = gemms_fwd_bwd_s([head_gemm(setup)], setup)
    logits = setup.tokens * model.vocab_size / plan.tp
    loss_s = elementwise_time_s(logits * (e + 4 + 4) + 4 * r * stream, acc)  # bf16 logits, fp32 softmax, final norm
    out["last_fwd"], out["last_bwd"] = head_fwd + loss_s, head_bwd + loss_s
    out["first_tp_fwd"], out["first_tp_bwd"], out["last_tp_fwd"], out["last_tp_bwd"] = edge_tp_s(setup)
    out["p2p_bytes"] = r * stream / plan.tp  # the residual stream; scatter/gather optimisation (Narayanan et al. 2021, Sec. 4.1)
    out["vocab_params"] = model.vocab_size * model.hidden_size / plan.tp
    out["grad_bytes"] = setup.grad_bytes
    return out


def inner_columns(model: ModelSpec, cluster: Cluster, cols: PlanColumns,
                  framework: Framework) -> dict[str, np.ndarray]:
    """Inner quantities for every row of ``cols`` (rows must have ``seq_len`` filled)."""
    columns = [cols[f].astype(np.int64) for f in INNER_FIELDS]
    if framework.fsdp_casts_params:  # the residual stream's width depends on whether FSDP manages the row
        fsdp = (cols.dp * cols["cp"] > 1) & (cols.is_("sharding", "zero2") | cols.is_("sharding", "zero3"))
        columns.append(fsdp.astype(np.int64))
    keys = np.stack(columns, axis=1)
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    rows = [_row(Setup(model=model, cluster=cluster, plan=cols.plan(int(i)), framework=framework)) for i in first]
    inverse = inverse.reshape(-1)
    return {name: np.array([r[name] for r in rows])[inverse] for name in rows[0]}
