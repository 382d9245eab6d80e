"""Per-micro-batch time of one pipeline stage, by component, column-wise over plans.

A stage runs its layers (per-layer costs from :mod:`plait.cost.inner`), the embedding on
the first stage and the output projection plus loss on the last, with their TP collectives. Activation transfers
between stages are not part of a stage's time: in the steady state a rank computes other
micro-batches while they travel (:mod:`plait.cost.pipeline` charges them on the fill and
drain path, as the simulator finds). ZeRO-3/FSDP gathers are
prefetched one layer ahead, so per layer only the part of the gather (and, in the
backward, gather plus reduce-scatter) longer than that layer's compute is exposed, plus
the first gather, which nothing hides (Zhao et al. 2023, "PyTorch FSDP", Sec. 3.3). FSDP1's
``BACKWARD_POST`` issues each backward gather only after the previous layer's gradients, so
those gathers are in line and only the reduce-scatters overlap.
Without prefetch every gather is in line; per-module sharding (DeepSpeed-style hooks)
gathers recomputed layers a third time.
"""

from __future__ import annotations

import numpy as np

from plait.cost.framework import Framework
from plait.cost.overlap import hidden_remainder
from plait.cost.params import stage_layer_counts
from plait.plan.columns import PlanColumns
from plait.workload.model import ModelSpec

COMPONENTS = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "fsdp_comm")
Columns = dict[str, np.ndarray]


def recomputed_layers(cols: PlanColumns, n_dense: np.ndarray, n_moe: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dense, MoE) layers of a stage that full recomputation recomputes (the first ``recompute_layers``)."""
    layers = n_dense + n_moe
    k = np.where(cols["recompute_layers"] < 0, layers, np.minimum(cols["recompute_layers"], layers))
    k = np.where(cols.is_("recompute", "full"), k, 0)
    dense = np.minimum(k, n_dense)
    return dense, k - dense


def stage_time(model: ModelSpec, cols: PlanColumns, inner: Columns, fsdp: Columns,
               stage: np.ndarray, framework: Framework, overlap: float = 1.0) -> tuple[Columns, Columns]:
    """(forward, backward) seconds per component of one micro-batch on ``stage`` (per row);
    ``overlap`` is the accelerator's ``comm_overlap`` figure."""
    n_dense, n_moe = stage_layer_counts(model, cols["pp"], stage)
    n = {"d": n_dense, "m": n_moe}
    rc_dense, rc_moe = recomputed_layers(cols, n["d"], n["m"])
    full = cols.is_("recompute", "full")
    rc_count = {"d": np.where(full, rc_dense, n["d"]), "m": np.where(full, rc_moe, n["m"])}
    fwd = dict.fromkeys(COMPONENTS, 0.0)
    bwd = dict.fromkeys(COMPONENTS, 0.0)
    first_gather = np.zeros(len(cols))
    for t in ("d", "m"):
        count = n[t]
        rc_share = np.where(count > 0, rc_count[t] / np.maximum(count, 1), 0.0)
        gather, reduce = fsdp[f"gather_{t}"], fsdp[f"reduce_{t}"]
        regather = rc_share * gather * full if framework.shard_unit == "module" else 0.0
        bwd_comm = gather + regather + reduce
        if framework.shard_prefetch:
            fsdp_fwd = hidden_remainder(gather, inner[f"fwd_{t}"] + inner[f"tp_fwd_{t}"], overlap)
            bwd_work = inner[f"bwd_{t}"] + rc_share * inner[f"rc_{t}"] + inner[f"tp_bwd_{t}"]
            if framework.shard_backward_prefetch == "post":
                fsdp_bwd = gather + regather + hidden_remainder(reduce, bwd_work, overlap)
            else:
                fsdp_bwd = hidden_remainder(bwd_comm, bwd_work, overlap)
        else:
            fsdp_fwd, fsdp_bwd = gather, bwd_comm
        fsdp_fwd = fsdp_fwd + fsdp[f"host_fwd_{t}"]  # hooks run in line with the layer
        fsdp_bwd = fsdp_bwd + fsdp[f"host_bwd_{t}"] + rc_share * full * fsdp[f"host_fwd_{t}"]  # recompute re-runs them
        first_gather = np.where((first_gather == 0) & (count > 0), gather, first_gather)
        fwd["compute"] = fwd["compute"] + count * inner[f"fwd_{t}"]
        bwd["compute"] = bwd["compute"] + count * inner[f"bwd_{t}"]
        bwd["recompute"] = bwd["recompute"] + rc_count[t] * inner[f"rc_{t}"]
        for key, name in (("tp_comm", "tp"), ("cp_comm", "cp"), ("ep_comm", "ep")):
            fwd[key] = fwd[key] + count * inner[f"{name}_fwd_{t}"]
            bwd[key] = bwd[key] + count * inner[f"{name}_bwd_{t}"]
        fwd["fsdp_comm"] = fwd["fsdp_comm"] + count * fsdp_fwd
        bwd["fsdp_comm"] = bwd["fsdp_comm"] + count * fsdp_bwd
    fwd["fsdp_comm"] = fwd["fsdp_comm"] + first_gather
    first, last = stage == 0, stage == cols["pp"] - 1
    fwd["compute"] = fwd["compute"] + first * inner["first_fwd"] + last * inner["last_fwd"]
    bwd["compute"] = bwd["compute"] + first * inner["first_bwd"] + last * inner["last_bwd"]
    fwd["tp_comm"] = fwd["tp_comm"] + first * inner["first_tp_fwd"] + last * inner["last_tp_fwd"]
    bwd["tp_comm"] = bwd["tp_comm"] + first * inner["first_tp_bwd"] + last * inner["last_tp_bwd"]
    size = len(cols)
    return ({k: np.broadcast_to(v, (size,)).astype(np.float64) for k, v in fwd.items()},
            {k: np.broadcast_to(v, (size,)).astype(np.float64) for k, v in bwd.items()})
