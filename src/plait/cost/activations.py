"""Activation memory of one transformer layer for one micro-batch, per rank.

Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models", Sec. 4.1, Eq. 1-2, Table 2) count, per layer with ``s b h`` the micro-batch's
hidden states and 2-byte activations: attention ``11sbh + 5as^2b``, MLP ``19sbh``,
LayerNorms ``4sbh`` — ``sbh(34 + 5as/h)`` in all. With tensor parallelism (no SP) the
norm inputs, the q/k/v and MLP-up inputs and the dropout masks (``10sbh``) stay
replicated and the rest is divided by ``t``; sequence parallelism divides everything
by ``t``; selective recomputation drops the ``5as^2b`` attention-core terms; full
recomputation keeps only the ``2sbh`` layer input.

Generalised here term by term: GQA shrinks K and V to ``num_kv_heads``; a gated MLP
stores two up-projection outputs, and run op by op in eager PyTorch (``F.silu(a) * b``) a third, the activation's
output, which the multiply saves beside ``b`` (``silu`` saves its input, ``mul`` both operands: PyTorch's
``tools/autograd/derivatives.yaml``; measured by tracing, :mod:`plait.workloads.traced.tracing`); the MLP
width is ``ffn_hidden_size`` rather than ``4h``; dropout masks exist only when the model uses dropout; a flash-attention kernel
stores no score matrix, only its output and the fp32 log-sum-exp per query and head
(Dao 2023, FlashAttention-2, Sec. 3.1); context parallelism divides the sequence, and LSS keeps every
rank's K/V, gathered (:func:`plait.cost.context_parallel.lss_gathered_kv_bytes`), and the visibility mask it
hands the kernel (:func:`plait.cost.context_parallel.lss_mask_bytes`).
"""

from __future__ import annotations

from plait.cost import op_sac
from plait.cost.context_parallel import lss_gathered_kv_bytes, lss_mask_bytes
from plait.cost.op_sac import LSE_BYTES
from plait.cost.setup import Setup


def _gemm_input_bytes(setup: Setup) -> int:
    """Bytes per stored GEMM input: fp8 runs keep the fp8 cast for the backward pass
    (Transformer Engine ``Linear`` saves its quantised input), others the bf16 tensor."""
    return 1 if setup.gemm_dtype == "fp8" else setup.act_bytes


def _replicated_share(setup: Setup) -> float:
    """Fraction of the norm/residual-stream tensors one TP rank stores (1/t with SP)."""
    return 1.0 / setup.plan.tp if setup.plan.sp else 1.0


def attention_block_bytes(setup: Setup) -> tuple[float, float]:
    """(kept under selective recompute, attention-core bytes that selective recompute drops)."""
    model, plan, e, tokens = setup.model, setup.plan, setup.act_bytes, setup.tokens
    rep = _replicated_share(setup) * tokens * model.hidden_size
    heads = model.num_heads // plan.tp
    kv = setup.attention_kv_heads  # K/V as the attention kernel saves them
    mask = 1.0 if model.dropout else 0.0
    g = _gemm_input_bytes(setup)
    kept = (e + g) * rep  # norm input, q/k/v projection input
    kept += e * tokens * (heads * model.qk_head_dim + kv * model.qk_head_dim + kv * model.v_head_dim)
    kept += g * tokens * heads * model.v_head_dim  # output-projection input
    kept += mask * rep  # dropout mask after the output projection
    kept += lss_gathered_kv_bytes(setup)  # LSS: the whole sequence's K/V, saved for the backward
    if setup.attention_kernel != "unfused":
        core = LSE_BYTES * tokens * heads
    else:
        scores = tokens * heads * setup.seq_len  # local queries x all keys
        core = scores * (e + (mask + e if model.dropout else 0.0))  # softmax out (+ dropout mask and output)
    core += lss_mask_bytes(setup)  # LSS: its visibility mask, a bias the kernel keeps (recomputed with the core)
    return kept, core


def mlp_block_bytes(setup: Setup, moe_layer: bool) -> float:
    """Stored activations of the MLP (or MoE) block."""
    model, plan, e, tokens = setup.model, setup.plan, setup.act_bytes, setup.tokens
    rep = _replicated_share(setup) * tokens * model.hidden_size
    mask = rep if model.dropout else 0.0
    ups = 2 if model.mlp == "gated" else 1
    g = _gemm_input_bytes(setup)
    per_width = e * ups + g  # up-projection outputs (activation input) and the down-projection input
    if model.mlp == "gated" and setup.framework.pointwise == "eager":
        per_width += e  # eager silu(a) * b: the multiply saves silu's output beside b (PyTorch derivatives.yaml)
    if not moe_layer:
        width = model.ffn_hidden_size / plan.tp
        return (e + g) * rep + tokens * width * per_width + mask
    assert model.moe is not None
    moe = model.moe
    routed = tokens * moe.top_k
    stored = (e + e) * rep + g * routed * model.hidden_size  # norm input, router input, dispatched tokens
    stored += routed * moe.expert_ffn_hidden_size / plan.tp * per_width
    if moe.num_shared_experts:
        stored += tokens * moe.num_shared_experts * moe.shared_expert_ffn_hidden_size / plan.tp * per_width
    return stored + mask


def layer_bytes(setup: Setup, moe_layer: bool) -> float:
    """Activations one layer stores for one micro-batch with no recomputation."""
    return stored_bytes(setup, moe_layer)[0]


def layer_bytes_selective(setup: Setup, moe_layer: bool) -> float:
    """Activations with the attention core recomputed (Korthikanti et al. 2022, Sec. 4.2.2), or what per-op
    selective checkpointing keeps where the engine's selective recomputation is that
    (:attr:`plait.engine.facts.EngineFacts.selective_policy`, :func:`plait.cost.op_sac.saved_bytes`)."""
    return stored_bytes(setup, moe_layer)[1]


def stored_bytes(setup: Setup, moe_layer: bool) -> tuple[float, float]:
    """(:func:`layer_bytes`, :func:`layer_bytes_selective`) of one layer, their shared attention and MLP terms
    computed once (one estimate asks for both)."""
    kept, core = attention_block_bytes(setup)
    mlp = mlp_block_bytes(setup, moe_layer)
    if setup.framework.selective_policy == "every_other_mm":
        return kept + core + mlp, op_sac.saved_bytes(setup, moe_layer, layer_input_bytes(setup))
    return kept + core + mlp, kept + mlp


def layer_input_bytes(setup: Setup) -> float:
    """The checkpointed layer input kept under full recomputation (``2sbh``, ``/t`` with SP)."""
    return setup.act_bytes * _replicated_share(setup) * setup.tokens * setup.model.hidden_size


def first_stage_extra_bytes(setup: Setup) -> float:
    """Embedding output (and its dropout mask) on the first stage."""
    rep = _replicated_share(setup) * setup.tokens * setup.model.hidden_size
    return setup.act_bytes * rep + (rep if setup.model.dropout else 0.0)


def last_stage_extra_bytes(setup: Setup) -> float:
    """Final norm input plus logits and cross-entropy buffers on the last stage.

    Korthikanti et al. 2022, Sec. 4.3: the output layer and loss need ``4sbv/t`` bytes
    (fp32 logits for the softmax) on top of the ``2sbh`` final-norm input; the 4 bytes per logit are the
    engine's peak (:attr:`plait.engine.facts.EngineFacts.loss_bytes_per_logit`), over the local vocabulary
    shard unless the engine gathers the full logits before the loss (``tp_loss = "gathered"``).
    """
    framework = setup.framework
    rep = _replicated_share(setup) * setup.tokens * setup.model.hidden_size
    shards = setup.plan.tp if framework.tp_loss == "vocab_parallel" else 1
    return setup.act_bytes * rep + framework.loss_bytes_per_logit * setup.tokens * setup.model.vocab_size / shards
