"""Per-op selective activation checkpointing: what a block saves and what it runs again.

torchtitan's ``SelectiveAC`` (torchtitan 0.3.0 ``torchtitan/distributed/activation_checkpoint.py``
``SelectiveAC._wrap_block``; the same rule since 2024, docs/research/torchtitan_memory_versions.md section 3)
checkpoints every transformer block with a policy over the ops it runs: the outputs of attention kernels and
of every other ``aten.mm`` are saved (the block's matmul counter starts at 0 and the 1st, 3rd, 5th ... are
kept, the even ones recomputed), everything else is recomputed in the backward. The router's matmul is forced
to recompute and not counted (``force_recompute_mm_shapes_by_fqns = ["moe.router.gate"]``); routed experts run
``_grouped_mm``, not ``aten.mm``, so they are neither counted nor saved. The block input is kept as the
checkpoint's input.

The save list also holds the functional collectives' outputs (``reduce_scatter_tensor``, ``all_to_all_single``):
under sequence parallelism each row-parallel projection's reduce-scatter output is kept, and a compiled MoE block
keeps its dispatch and combine all-to-all outputs (funcol there; eager, torchtitan's dispatcher calls
``dist.all_to_all``, which the list does not hold, so the all-to-alls run again). The SP all-gathers and TP
all-reduces are not listed: they run again with what they feed.

Eager, the recompute replays the block's forward, every op whose output was not saved; compiled, the
min-cut partitioner keeps and recomputes only what the backward reads (docs/research/torchtitan_memory_versions.md
section 3): the down projection's output feeds only the residual add that ends the block, so it is neither saved
nor recomputed (the output projection's is: the residual sum after attention feeds the MLP's norm).
"""

from __future__ import annotations

from plait.cost.compute import gemms_fwd_s
from plait.cost.flops import Gemm, attention_gemms, moe_gemms
from plait.cost.setup import Setup

LSE_BYTES = 4  # fp32 log-sum-exp per query row and head (FlashAttention-2, Alg. 1 output L)
RESIDUAL_ONLY = frozenset({"w2", "down", "shared_w2", "shared_down"})
"""Matmuls whose outputs only the block's closing residual add (or the MoE combine) reads: its backward never needs
them."""


def block_matmuls(setup: Setup, moe_layer: bool) -> list[tuple[str, Gemm]]:
    """The ``aten.mm`` calls of one block that the policy counts, in the order the block runs them, each with
    its GEMM on this rank (output ``m x n``)."""
    model, plan, t, h = setup.model, setup.plan, setup.tokens, setup.model.hidden_size
    *inputs, output = attention_gemms(setup)  # q/k/v (or MLA's) projections, then the output projection
    if not model.mla and not setup.framework.fused_input_projections:  # wq, wk, wv as three matmuls
        heads, kv = model.num_heads // plan.tp, setup.kv_heads_per_rank
        inputs = [Gemm(t, n * model.head_dim, h) for n in (heads, kv, kv)]
    calls = [("in", g) for g in inputs] + [("o", output)]
    if moe_layer and model.moe is not None:
        if model.moe.num_shared_experts:
            calls += _mlp_matmuls(setup, "shared_", model.moe.num_shared_experts * model.moe.shared_expert_ffn_hidden_size)
        return calls
    return calls + _mlp_matmuls(setup, "", model.ffn_hidden_size)


def _mlp_matmuls(setup: Setup, prefix: str, ffn: int) -> list[tuple[str, Gemm]]:
    """An MLP's matmuls on this rank, named as torchtitan's FeedForward runs them: ``w1``, ``w3``, ``w2`` (gated) or
    ``up``, ``down``."""
    t, h, width = setup.tokens, setup.model.hidden_size, ffn // setup.plan.tp
    names = ("w1", "w3", "w2") if setup.model.mlp == "gated" else ("up", "down")
    return [(prefix + n, Gemm(t, width, h)) for n in names[:-1]] + [(prefix + names[-1], Gemm(t, h, width))]


def _compiled(setup: Setup) -> bool:
    return setup.framework.pointwise != "eager"


def _saved(setup: Setup, moe_layer: bool) -> tuple[list[Gemm], list[tuple[str, Gemm]]]:
    """(saved matmuls, recomputed matmuls with their names) of one block."""
    compiled = _compiled(setup)
    saved, again = [], []
    for i, (name, gemm) in enumerate(block_matmuls(setup, moe_layer)):
        if compiled and name in RESIDUAL_ONLY:
            continue
        if i % 2 == 0:
            saved.append(gemm)
        else:
            again.append((name, gemm))
    return saved, again


def saves_attention(setup: Setup) -> bool:
    """Whether the attention kernel's output and log-sum-exp are in the save list."""
    return setup.framework.sac_saves_attention and setup.attention_kernel != "unfused"


def saved_bytes(setup: Setup, moe_layer: bool, block_input: float) -> float:
    """Bytes one block keeps for one micro-batch: its input, the saved matmul outputs (in the activation dtype:
    torchao's float8 matmuls return bf16), when saved the attention output and its fp32 log-sum-exp, under sequence
    parallelism the reduce-scatter outputs the backward reads (the output projection's; eager, the down
    projection's too), and in a compiled MoE block with expert parallelism its two all-to-all outputs."""
    model, plan, e, t = setup.model, setup.plan, setup.act_bytes, setup.tokens
    saved, _ = _saved(setup, moe_layer)
    kept = block_input + e * sum(g.m * g.n * g.count for g in saved)
    if saves_attention(setup):
        kept += t * (model.num_heads // plan.tp) * (e * model.v_head_dim + LSE_BYTES)
    if plan.tp > 1 and plan.sp:
        kept += (1 if _compiled(setup) else 2) * e * t * model.hidden_size / plan.tp
    if moe_layer and model.moe is not None and plan.ep > 1 and _compiled(setup):
        kept += 2 * e * t * model.moe.top_k * model.hidden_size
    return kept


def recompute_s(setup: Setup, moe_layer: bool, pointwise_s: float, core_s: float, ep_s: float, tp_s: float,
                cp_s: float) -> float:
    """Seconds the backward spends running one block's unsaved ops again: the recomputed matmuls, the
    memory-bound ops (``pointwise_s``, the block's forward share), the attention kernel and its context-parallel
    exchange unless saved (``core_s``, ``cp_s``), half the block's forward TP collectives (``tp_s``: the
    all-gathers under SP, the output projection's all-reduce without) and, in an MoE layer, the routed experts with,
    eager, their all-to-alls (``ep_s``)."""
    _, named = _saved(setup, moe_layer)
    if moe_layer and setup.model.moe is not None:  # the whole MoE block again (its shared experts counted there)
        again = [g for name, g in named if not name.startswith("shared")] + moe_gemms(setup)
        if _compiled(setup):
            ep_s = 0.0
    else:
        again, ep_s = [g for _, g in named], 0.0
    gemm_s = gemms_fwd_s(again, setup) if again else 0.0
    attention_s = 0.0 if saves_attention(setup) else core_s + cp_s
    return gemm_s + pointwise_s + attention_s + tp_s / 2 + ep_s
