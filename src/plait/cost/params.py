"""Parameters held by one rank, per layer and per pipeline stage.

Tensor parallelism shards every projection and MLP matrix by ``tp`` (norms and the MoE
router are replicated); expert matrices are further split over ``ep`` (Megatron-Core
MoE; Lepikhin et al. 2020, GShard). The input embedding sits on the first stage, the
final norm and output projection on the last; with tied embeddings and ``pp > 1`` the
last stage keeps its own copy (Megatron-LM, Shoeybi et al. 2019). Layers are split
over stages as evenly as possible, the first stages taking the remainder, and leading
dense layers of an MoE model land on the first stages.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from plait.cost.setup import Setup
from plait.plan.ops import SCALAR, Ops
from plait.workload.model import ModelSpec


def layer_split(setup: Setup, moe_layer: bool) -> tuple[float, float]:
    """(dense, expert) parameters of one layer on one rank."""
    model, plan = setup.model, setup.plan
    norms = 2 * model.norm_params()
    attention = model.attention_params() / plan.tp
    if not moe_layer:
        return norms + attention + model.mlp_params(model.ffn_hidden_size) / plan.tp, 0.0
    assert model.moe is not None
    moe = model.moe
    router = model.router_params()
    shared = moe.num_shared_experts * model.mlp_params(moe.shared_expert_ffn_hidden_size) / plan.tp if moe.num_shared_experts else 0.0
    experts = moe.num_experts * model.mlp_params(moe.expert_ffn_hidden_size) / (plan.tp * plan.ep)
    return norms + attention + router + shared, experts


def stage_layer_counts(model: ModelSpec, pp: Any, stage: Any, xp: Ops) -> tuple[Any, Any]:
    """(dense layers, MoE layers) on pipeline stage ``stage`` of ``pp`` stages, per row (ints with ``xp`` =
    :data:`~plait.plan.ops.SCALAR`, kept per distinct split)."""
    leading, step = (model.moe.num_dense_layers, model.moe.layer_step) if model.moe else (model.num_layers, 1)
    if xp.scalar:
        return _one_split(model.num_layers, leading, step, pp, stage)
    return _split(model.num_layers, leading, step, pp, stage, xp)


def _split(num_layers: int, leading: int, step: int, pp: Any, stage: Any, xp: Ops) -> tuple[Any, Any]:
    """Layers ``start .. start + count - 1`` of the stage; MoE among them as :meth:`ModelSpec.moe_layers_between`
    counts them (past the ``leading`` dense layers, every ``step``-th)."""
    base, extra = divmod(num_layers, pp)
    start = stage * base + xp.minimum(stage, extra)
    count = base + (stage < extra)
    first = xp.maximum(start, leading)
    stop = start + count
    moe = xp.where(stop > first, stop // step - first // step, 0)
    return count - moe, moe


@lru_cache(maxsize=4096)
def _one_split(num_layers: int, leading: int, step: int, pp: int, stage: int) -> tuple[int, int]:
    return _split(num_layers, leading, step, pp, stage, SCALAR)
