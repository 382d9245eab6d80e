"""Parameters held by one rank of one pipeline stage, split into what shards how.

Tensor parallelism shards every projection and MLP matrix by ``tp`` (norms and the MoE
router are replicated); expert matrices are further split over ``ep`` (Megatron-Core
MoE; Lepikhin et al. 2020, GShard). The input embedding sits on the first stage, the
final norm and output projection on the last; with tied embeddings and ``pp > 1`` the
last stage keeps its own copy (Megatron-LM, Shoeybi et al. 2019).
"""

from __future__ import annotations

from dataclasses import dataclass

from plait.cost.setup import Setup


@dataclass(frozen=True)
class StageParams:
    """Parameter counts on one rank of one stage."""

    dense: float
    """Parameters whose data-parallel group is ``dp * cp`` (all but routed experts)."""
    expert: float
    """Routed-expert parameters (data-parallel group ``dp * cp / ep``)."""
    largest_layer: float
    """Parameters of the largest layer on this rank (FSDP gathers one layer at a time)."""

    @property
    def total(self) -> float:
        """All parameters on this rank."""
        return self.dense + self.expert


def layer_split(setup: Setup, moe_layer: bool) -> tuple[float, float]:
    """(dense, expert) parameters of one layer on one rank."""
    model, plan = setup.model, setup.plan
    norms = 2 * model.norm_params()
    attention = model.attention_params() / plan.tp
    if not moe_layer:
        return norms + attention + model.mlp_params(model.ffn_hidden_size) / plan.tp, 0.0
    assert model.moe is not None
    moe = model.moe
    router = model.hidden_size * moe.num_experts
    shared = moe.num_shared_experts * model.mlp_params(moe.shared_expert_ffn_hidden_size) / plan.tp if moe.num_shared_experts else 0.0
    experts = moe.num_experts * model.mlp_params(moe.expert_ffn_hidden_size) / (plan.tp * plan.ep)
    return norms + attention + router + shared, experts


def stage_layer_counts(setup: Setup, stage: int) -> tuple[int, int]:
    """(dense layers, MoE layers) on pipeline stage ``stage`` (leading dense layers go first)."""
    model, p = setup.model, setup.plan.pp
    base, extra = divmod(model.num_layers, p)
    start = stage * base + min(stage, extra)
    count = base + (1 if stage < extra else 0)
    dense_end = model.num_dense_layers
    dense = max(0, min(start + count, dense_end) - start)
    return dense, count - dense


def stage_params(setup: Setup, stage: int) -> StageParams:
    """Parameters on one rank of pipeline stage ``stage``."""
    model, plan = setup.model, setup.plan
    n_dense, n_moe = stage_layer_counts(setup, stage)
    d_dense, _ = layer_split(setup, False)
    dense = n_dense * d_dense
    expert = 0.0
    largest = d_dense if n_dense else 0.0
    if n_moe:
        m_dense, m_expert = layer_split(setup, True)
        dense += n_moe * m_dense
        expert += n_moe * m_expert
        largest = max(largest, m_dense + m_expert)
    vocab = model.vocab_size * model.hidden_size / plan.tp
    if stage == 0:
        dense += vocab + (model.embedding_params() - model.vocab_size * model.hidden_size)
    if stage == plan.pp - 1:
        dense += model.norm_params()
        if not model.tied_embeddings or plan.pp > 1:
            dense += vocab
    return StageParams(dense, expert, largest)
