"""Memory per GPU of one pipeline stage, column-wise over plans.

Model states follow ZeRO (Rajbhandari et al. 2020, Sec. 3.1 and 5.1): mixed-precision
Adam keeps 2-byte weights, gradients in the reduction dtype, and ``K = 12`` bytes of
fp32 master weights and two moments per parameter; ZeRO-1/2/3 divide the optimizer
states / +gradients / +weights by the sharding group. Megatron's distributed optimizer
and FSDP shard over data- and context-parallel ranks together, and expert states over
``dp * cp / ep`` (Megatron-Core ``expert_data_parallel``). FSDP holds the current and
the prefetched layer unsharded (Zhao et al. 2023, "PyTorch FSDP", Sec. 3.2.2).
Activations: per-layer bytes of :mod:`plait.cost.activations` (via :mod:`plait.cost.inner`)
times the micro-batches in flight (:mod:`plait.cost.pipeline`); under full recomputation
one layer's activations are live again while it is recomputed.
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING

from plait.cost.inner_values import Inner
from plait.cost.params import stage_layer_counts
from plait.cost.pipeline import inflight_micro_batches
from plait.cost.stage import recomputed_layers
from plait.cost.swap import device_is_host, resident_activation_bytes, swapped_layers
from plait.engine.facts import EngineFacts
from plait.hardware.accelerator import Accelerator
from plait.kept import Kept
from plait.plan.columns import PlanColumns, per_plan
from plait.units import GIB
from plait.workload.model import ModelSpec

if TYPE_CHECKING:
    import numpy as np

PARAM_BYTES = 2  # bf16/fp16 compute copy of the weights (Micikevicius et al. 2018)
MEMORY_ITEMS = ("weights", "gradients", "optimizer", "activations", "comm_buffers", "runtime_reserved",
                "fragmentation")
Columns = dict[str, "np.ndarray"]


@per_plan
def full_precision(cols: PlanColumns) -> np.ndarray:
    """Mask of plans whose weights are fp32 themselves (precision fp32 or tf32)."""
    return cols.is_("precision", "fp32") | cols.is_("precision", "tf32")


@per_plan
def param_bytes(cols: PlanColumns) -> np.ndarray:
    """Bytes per weight of the compute copy: :data:`PARAM_BYTES` under mixed precision, 4 under fp32 and tf32 (the
    fp32 weights are the ones the GEMMs read; TF32 rounds operands inside the tensor core, NVIDIA Ampere
    whitepaper)."""
    return cols.xp.where(full_precision(cols), 4, PARAM_BYTES)


@per_plan
def optimizer_bytes_per_param(cols: PlanColumns) -> np.ndarray:
    """fp32 master copy (if kept, and only beside 16-bit weights: fp32 and tf32 plans update the weights
    themselves) plus optimizer moments: AdamW two, SGD-momentum one."""
    xp = cols.xp
    master = cols["master_weights"] & xp.not_(full_precision(cols))
    return xp.where(cols.is_("optimizer", "adamw"), 8, 4) + xp.where(master, 4, 0)


@per_plan
def shard_groups(cols: PlanColumns) -> tuple[np.ndarray, np.ndarray]:
    """(dense, expert) sharding-group sizes of ZeRO/FSDP (1 when nothing is sharded)."""
    xp = cols.xp
    sharded = xp.not_(cols.is_("sharding", "none"))
    dense = xp.where(sharded, cols["dp_shard"] * cols["cp"], 1)
    return dense, xp.where(sharded, xp.maximum(1, dense // cols["ep"]), 1)


def stage_params(model: ModelSpec, cols: PlanColumns, inner: Inner, stage: np.ndarray) -> Columns:
    """Parameters on one rank of ``stage``: dense, expert, the largest layer, the norm weights (two per layer
    and the final norm; replicated over TP), and those of its transformer layers alone."""
    xp = cols.xp
    n_dense, n_moe = stage_layer_counts(model, cols["pp"], stage, xp)
    dense = n_dense * inner.dense.num_params + n_moe * inner.moe.num_params
    positions = model.embedding_params() - model.vocab_size * model.hidden_size
    dense = dense + (stage == 0) * (inner.num_vocab_params + positions)
    own_head = (not model.tied_embeddings) | (cols["pp"] > 1)
    dense = dense + (stage == cols["pp"] - 1) * (model.norm_params() + own_head * inner.num_vocab_params)
    largest = xp.maximum(xp.where(n_dense > 0, inner.dense.num_params, 0.0),
                         xp.where(n_moe > 0, inner.moe.num_params + inner.moe.num_expert_params, 0.0))
    norms = (2 * (n_dense + n_moe) + (stage == cols["pp"] - 1)) * model.norm_params()
    layers = n_dense * inner.dense.num_params + n_moe * (inner.moe.num_params + inner.moe.num_expert_params)
    return {"dense": dense, "expert": n_moe * inner.moe.num_expert_params, "largest": largest, "norms": norms,
            "layers": layers}



_PARAMS: Kept[Columns] = Kept(256)


def kept_stage_params(model: ModelSpec, cols: PlanColumns, inner: Inner, stage: int,
                      kind: tuple[int, int, bool, bool]) -> Columns:
    """:func:`stage_params` of one plan's ``stage``, kept for the last 256 by ``kind`` (its (dense, MoE) layer counts
    and whether it is the first and the last stage: what it reads of ``stage`` and ``pp`` but ``pp > 1``,
    :func:`plait.cost.batch.stage_class`), ``pp > 1`` and the identity of the model and the per-layer quantities
    (kept themselves), which the entry holds (frozen: the same object is the same value, its id not reused while it
    lives). The dict is shared: read, never written."""
    assert cols.single is not None, "one plan's columns"
    key = (id(model), id(inner), cols["pp"] > 1, *kind)
    return _PARAMS.get(key, (model, inner), lambda: stage_params(model, cols, inner, stage))

def _activation_bytes(model: ModelSpec, cols: PlanColumns, inner: Inner, stage: np.ndarray,
                      swapping: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(device bytes, micro-batches in flight, bytes swapped out to host memory at the peak)."""
    xp = cols.xp
    n_dense, n_moe = stage_layer_counts(model, cols["pp"], stage, xp)
    rc_dense, rc_moe = recomputed_layers(cols, n_dense, n_moe)
    d, m = inner.kinds
    full_mb = n_dense * d.activation_bytes + n_moe * m.activation_bytes
    selective_mb = n_dense * d.selective_activation_bytes + n_moe * m.selective_activation_bytes
    recomputed = rc_dense + rc_moe
    recompute_mb = (recomputed * inner.layer_input_bytes + (n_dense - rc_dense) * d.activation_bytes
                    + (n_moe - rc_moe) * m.activation_bytes)
    working = xp.where(recomputed > 0, xp.maximum(xp.where(n_dense > 0, d.activation_bytes, 0.0),
                                                  xp.where(n_moe > 0, m.activation_bytes, 0.0)), 0.0)
    # selective recomputation materializes what it dropped for one layer at a time, during that layer's backward
    dropped = xp.maximum(xp.where(n_dense > 0, d.activation_bytes - d.selective_activation_bytes, 0.0),
                         xp.where(n_moe > 0, m.activation_bytes - m.selective_activation_bytes, 0.0))
    working = xp.where(cols.is_("recompute", "selective"), xp.maximum(dropped, 0.0), working)
    per_mb = xp.select([cols.is_("recompute", "selective"), cols.is_("recompute", "full")],
                       [selective_mb, recompute_mb], full_mb)
    inflight = inflight_micro_batches(cols, stage)
    total = inflight * (per_mb + (stage == 0) * inner.first_stage_bytes) + working
    total = total + (stage == cols["pp"] - 1) * inner.last_stage_bytes
    host = cols.zeros()
    if swapping:  # the layer in flight and the prefetched one stay; the head and loss as without (plait.cost.swap)
        sw_dense, sw_moe = swapped_layers(cols, n_dense, n_moe)
        resident = resident_activation_bytes(inner, sw_dense, sw_moe, xp)
        every = resident + (stage == cols["pp"] - 1) * inner.last_stage_bytes
        # swap_layers >= 0: only those layers' activations leave (recomputation is off: swapping requires it)
        some = xp.minimum(total, total - inflight * (sw_dense * d.activation_bytes + sw_moe * m.activation_bytes)
                          + resident)
        kept = xp.where(cols["swap_layers"] < 0, every, some)
        host = xp.where(cols["swap_activations"], total - kept, 0.0)
        total = xp.where(cols["swap_activations"], kept, total)
    return total, inflight, host


def stage_memory(model: ModelSpec, acc: Accelerator, cols: PlanColumns, inner: Inner, stage: np.ndarray,
                 framework: EngineFacts, params: Columns | None = None) -> Columns:
    """Bytes per component on one GPU of ``stage``, plus ``total``, ``inflight`` and ``host_activations`` (what
    activation swapping holds in host memory for this GPU, :mod:`plait.cost.swap`); ``params``: the stage's
    :func:`stage_params`, when the caller has them."""
    xp, params = cols.xp, stage_params(model, cols, inner, stage) if params is None else params
    weight_bytes = param_bytes(cols)
    dense_group, expert_group = shard_groups(cols)
    total_params = params["dense"] + params["expert"]
    sharded = params["dense"] / dense_group + params["expert"] / expert_group
    zero3 = cols.is_("sharding", "zero3")
    weights = xp.where(cols["offload_params"], 0.0, weight_bytes * xp.where(zero3, sharded, total_params))
    weights = weights + inner.weight_cache_bytes * params["layers"]  # fp8 copies of the layers' GEMM weights
    grads = inner.grad_bytes * xp.where(zero3 | cols.is_("sharding", "zero2"), sharded, total_params)
    grads = xp.where(cols["offload_params"], 0.0, grads)  # FSDP2 CPUOffloadPolicy keeps the gradient shards on the host
    optimizer = xp.where(cols["offload_optimizer"], 0.0, optimizer_bytes_per_param(cols) * xp.where(
        cols.is_("sharding", "none"), total_params, sharded))
    if framework.pipeline_keeps_gathered:  # EngineFacts.pipeline_keeps_gathered: the stage gathered, gradients unsharded
        kept = (cols["pp"] > 1) & xp.not_(cols["offload_params"])
        weights = weights + xp.where(kept & zero3 & (dense_group > 1), weight_bytes * total_params, 0.0)
        grads = grads + xp.where(kept & (zero3 | cols.is_("sharding", "zero2")) & (dense_group > 1),
                                 inner.grad_bytes * total_params, 0.0)
    buffers = xp.where((zero3 & (dense_group > 1)) | cols["offload_params"],
                       params["largest"] * (2 * weight_bytes + inner.grad_bytes), 0.0)
    swapping = not device_is_host(acc) and bool(cols["swap_activations"] if xp.scalar else cols["swap_activations"].any())
    activations, inflight, host = _activation_bytes(model, cols, inner, stage, swapping)
    eff = acc.efficiency
    out = {
        "weights": weights, "gradients": grads, "optimizer": optimizer, "activations": activations,
        "comm_buffers": buffers, "runtime_reserved": cols.full(eff.runtime_reserved_gib.value * GIB),
        "fragmentation": eff.allocator_overhead.value * (activations + buffers),
    }
    if not xp.scalar:  # one plan's are floats already
        size, column = len(cols), xp.column
        out, host = {k: column(v, size) for k, v in out.items()}, column(host, size)
    out["total"] = xp.total(out[k] for k in MEMORY_ITEMS)
    out["inflight"] = inflight
    out["host_activations"] = host
    return out


MEMORY_FIELDS = ("pp", "vpp", "schedule", "global_batch", "micro_batch", "dp_replicate", "dp_shard", "cp", "ep",
                 "sharding", "precision", "optimizer", "master_weights", "offload_params", "offload_optimizer",
                 "recompute", "recompute_layers", "swap_activations", "swap_layers")
"""The plan fields :func:`stage_memory` reads (its own, :func:`shard_groups`, :func:`param_bytes`,
:func:`optimizer_bytes_per_param`, :func:`_activation_bytes` and
:func:`plait.cost.pipeline.inflight_micro_batches` with the micro-batch count)."""
_MEMORY_VALUES = attrgetter(*MEMORY_FIELDS)
_MEMORY: Kept[Columns] = Kept(256)


def kept_stage_memory(model: ModelSpec, acc: Accelerator, cols: PlanColumns, inner: Inner, stage: int,
                      framework: EngineFacts, params: Columns) -> Columns:
    """:func:`stage_memory` of one plan's ``stage`` (``params``: its :func:`kept_stage_params`, a function of the
    rest of the key), kept for the last 256 by ``stage``, the plan's :data:`MEMORY_FIELDS` and the identity of the
    model, accelerator, per-layer quantities (kept themselves) and cost facts, which the entry holds (frozen: the same
    object is the same value, its id not reused while it lives). The dict is shared: read, never written."""
    assert cols.single is not None, "one plan's columns"
    key = (id(model), id(acc), id(inner), id(framework), stage, _MEMORY_VALUES(cols.single))
    return _MEMORY.get(key, (model, acc, inner, framework),
                       lambda: stage_memory(model, acc, cols, inner, stage, framework, params))
