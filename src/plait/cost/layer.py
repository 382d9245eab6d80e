"""Time of one transformer layer for one micro-batch on one rank, by component.

Compute goes through :mod:`plait.cost.compute` (GEMMs, flash or unfused attention,
memory-bound ops); collectives through :mod:`plait.cost.collectives` on the tier each
group crosses. Per layer and pass, Megatron tensor parallelism runs two all-reduces of
the ``b s h`` hidden states — two all-gathers and two reduce-scatters with sequence
parallelism, the same volume (Korthikanti et al. 2022, Sec. 4.2.2, Fig. 5;
:mod:`plait.cost.tp_comm`). Context
parallelism's K/V exchange and bookkeeping are in :mod:`plait.cost.context_parallel`.
Expert parallelism dispatches and combines tokens with one all-to-all each per pass
(Lepikhin et al. 2020, GShard, Sec. 2.2).

Memory-bound bytes per layer (forward; backward moves about twice as much): two norms
and two residual adds over the residual stream, rotary embedding of q and k, the MLP
activation (GELU reads 1 and writes 1 tensor, SwiGLU reads 2), dropout where the model
uses it, and — for fp8 GEMMs — a bf16-to-fp8 cast of every GEMM input (read 2 bytes,
write 1; Micikevicius et al. 2022, "FP8 Formats for Deep Learning", Sec. 4), plus what the run's stated
Transformer Engine recipe adds to it (:mod:`plait.cost.fp8_recipe`). Where the
framework runs them in eager PyTorch, the extra traffic of its unfused ops
(:func:`eager_extra_bytes_fwd`); where it copies grouped K/V heads out to every query head
before attention, those copies.
"""

from __future__ import annotations

from dataclasses import dataclass

from plait.cost import collectives as coll
from plait.cost import op_sac
from plait.cost.chunked import ep_chunked_s, tp_chunked_s
from plait.cost.compute import attention_flops_per_s, elementwise_time_s, gemm_time_s, gemms_fwd_bwd_s
from plait.cost.context_parallel import cp_exchange_s, cp_merge_bytes
from plait.cost.early_stop import early_stop_saved_s
from plait.cost.flops import Gemm, attention_core_flops, attention_gemms, mlp_block_gemms
from plait.cost.fp8_recipe import quantize_extra_bytes
from plait.cost.host import moe_forward_s
from plait.cost.moe_block import fp8_padding_bytes, moe_floor_s
from plait.cost.params import layer_split
from plait.cost.setup import Setup
from plait.cost.tp_comm import tp_comm_s, tp_pass_s
from plait.frozen import direct_init
from plait.plan.plan import FULL_PRECISIONS

FLASH_BWD_FLOPS_RATIO = 2.5  # FlashAttention-2, Sec. 3.2: backward runs 5 matmuls to the forward's 2


@direct_init
@dataclass(frozen=True)
class LayerCost:
    """Seconds one layer adds to one micro-batch on one rank."""

    fwd_compute_s: float
    bwd_compute_s: float
    recompute_s: float
    tp_fwd_s: float
    tp_bwd_s: float
    cp_fwd_s: float
    cp_bwd_s: float
    ep_fwd_s: float
    ep_bwd_s: float


def _elementwise_bytes_fwd(setup: Setup, gemms: list[Gemm], moe_layer: bool) -> float:
    model, plan, e, tokens = setup.model, setup.plan, setup.act_bytes, setup.tokens
    stream = tokens * model.hidden_size / (plan.tp if plan.sp else 1)
    r = setup.residual_bytes
    moved = 2 * 2 * r * stream + 2 * 3 * r * stream  # norms (read, write) and residual adds (2 reads, 1 write)
    if model.dropout:
        moved += 2 * (2 * e + 1) * stream
    if model.position == "rope":
        heads = model.num_heads // plan.tp + setup.kv_heads_per_rank
        moved += 2 * e * tokens * heads * model.qk_head_dim
    ups = 2 if model.mlp == "gated" else 1
    if moe_layer:
        assert model.moe is not None
        moe = model.moe
        routed = tokens * moe.top_k
        moved += (ups + 1) * e * routed * moe.expert_ffn_hidden_size / plan.tp
        moved += 2 * 2 * e * routed * model.hidden_size  # permute and un-permute copies
        if plan.ep > 1 and moe.num_experts // plan.ep > 1:
            # tokens arrive from the EP ranks grouped by sender: regrouped by local expert before the experts and
            # back after ("Permutation 2"/"Unpermutation 2", Megatron-Core token_dispatcher.py @0d8e0714
            # sort_chunks_by_idxs L740, L775), one read and one write of every routed token each way
            moved += 2 * 2 * e * routed * model.hidden_size
    else:
        moved += (ups + 1) * e * tokens * model.ffn_hidden_size / plan.tp
    if setup.gemm_dtype == "fp8":
        moved += 3 * sum(g.m * g.k * g.count for g in gemms)
    if setup.framework.pointwise == "eager":
        moved += eager_extra_bytes_fwd(setup, moe_layer)
    if setup.residual_bytes > e and setup.gemm_dtype == "bf16":
        moved += autocast_bytes_fwd(setup, moe_layer)
    kv, repeated = setup.kv_heads_per_rank, setup.attention_kv_heads
    if repeated > kv and not model.mla:  # K/V copied out to every query head: read the group, write the copies
        moved += e * tokens * (kv + repeated) * (model.qk_head_dim + model.v_head_dim)
    return moved


def eager_rmsnorm_bytes_per_element(residual_bytes: int) -> int:
    """HBM bytes per element of an RMSNorm forward run op by op as ``(x.float() * rsqrt(x.float().pow(2).mean(-1)
    + eps)).type_as(x) * w`` (torchtitan's ``RMSNorm``; PyTorch's composite ``rms_norm`` upcasts the same way):
    cast in ``r + 4`` (free when the input is fp32), square ``4 + 4``, mean ``4``, scale ``4 + 4``, cast out
    ``4 + r`` (free for fp32), weight ``2r``."""
    r = residual_bytes
    cast = 0 if r == 4 else (r + 4) + (4 + r)
    return cast + (4 + 4) + 4 + (4 + 4) + 2 * r


def eager_extra_bytes_fwd(setup: Setup, moe_layer: bool) -> float:
    """Forward HBM bytes PyTorch eager moves beyond the fused kernels :func:`_elementwise_bytes_fwd` counts.

    Every eager op reads its inputs and writes its output (bytes per element below; ``r`` residual, ``e``
    activation bytes; a cast to the dtype a tensor already has is free):

    - RMSNorm op by op (:func:`eager_rmsnorm_bytes_per_element`) against the fused kernel's ``2r``; two norms per
      layer. ``nn.LayerNorm`` is one native kernel in eager too.
    - Rotary embedding as an fp32 complex multiply (torchtitan/Llama ``apply_rotary_emb``): cast ``e + 4``,
      complex multiply ``4 + 4``, cast back ``4 + e``, against ``2e``, over every rotated q and k element.
    - SwiGLU ``silu(a) * b`` as two kernels: ``2e`` then ``3e``, against the fused ``3e``; GELU is one kernel.
    """
    model, plan, e, r, tokens = setup.model, setup.plan, setup.act_bytes, setup.residual_bytes, setup.tokens
    moved = 0.0
    if model.norm == "rmsnorm":
        stream = tokens * model.hidden_size / (plan.tp if plan.sp else 1)
        moved += 2 * (eager_rmsnorm_bytes_per_element(r) - 2 * r) * stream
    if model.position == "rope":
        moved += 16 * tokens * (model.num_heads // plan.tp + setup.kv_heads_per_rank) * model.qk_head_dim
    if model.mlp == "gated":
        ffn = (tokens * model.moe.top_k * model.moe.expert_ffn_hidden_size if moe_layer and model.moe
               else tokens * model.ffn_hidden_size)
        moved += 2 * e * ffn / plan.tp
    return moved


def autocast_bytes_fwd(setup: Setup, moe_layer: bool) -> float:
    """Forward bytes of the casts ``torch.autocast`` adds to a layer whose parameters and residual stream are
    fp32 and whose GEMMs run in bf16 (PyTorch AMP: ``linear`` is on the lower-precision list, so each call casts
    its fp32 operands; a leaf weight's cast is cached for the rest of the autocast region,
    ``torch.autocast(cache_enabled=True)``). The backward casts each gradient back to fp32 (the ``_to_copy``
    backward), which the layer's twice-the-forward rule covers.

    - Every projection that reads the normed hidden state casts it, read ``r`` and write ``e`` per element: the
      q/k/v and gate/up projections, one or three and one or two GEMMs (:attr:`EngineFacts.fused_input_projections`);
      the hidden state is whole on every TP rank there (all-gathered first under SP). An MoE layer's experts
      cast the tokens routed to them, ``top_k`` copies of each, and the router casts the hidden state once.
    - Every GEMM weight (not the norms', which run in fp32) is cast once per micro-batch, read 4 write 2 per parameter of this rank: the runtime enters
      autocast per micro-batch (``plait.run.worker._step``). A pipeline schedule runs its micro-batches in one
      region and casts once per step, less than counted here by the weights' share (a layer's cost is per
      micro-batch and cannot see their number).
    """
    model, e, r, tokens = setup.model, setup.act_bytes, setup.residual_bytes, setup.tokens
    fused = setup.framework.fused_input_projections
    ups = 1 if fused or model.mlp != "gated" else 2
    reads = 1 if fused else 3
    if moe_layer and model.moe is not None:
        reads += 1 + ups * model.moe.top_k + (ups if model.moe.num_shared_experts else 0)
    else:
        reads += ups
    dense, expert = layer_split(setup, moe_layer)
    weights = dense + expert - 2 * model.norm_params()  # the norms run in fp32 under autocast: their weights stay
    return reads * (r + e) * tokens * model.hidden_size + (4 + e) * weights


def _attention_core_s(setup: Setup) -> tuple[float, float]:
    """Forward and backward time of the attention core (``QK^T``, softmax, ``PV``)."""
    flops = attention_core_flops(setup)
    acc = setup.cluster.accelerator
    dtype = setup.gemm_dtype if setup.gemm_dtype in FULL_PRECISIONS else "bf16"  # fp8 runs attend in bf16
    if setup.attention_kernel != "unfused":  # ring attention works on cp-sized blocks, Ulysses on the whole sequence
        # of cp times fewer heads (Jacobs et al. 2023, Sec. 3.1); LSS on the rank's S/cp queries over all keys, taken
        # at the queries' length (they set the kernel's parallelism), as the ring
        seq = setup.seq_len if setup.plan.cp_attention == "ulysses" else setup.local_seq
        per_s = attention_flops_per_s(acc, seq, setup.attention_kernel, dtype)
        return flops / per_s, FLASH_BWD_FLOPS_RATIO * flops / per_s
    model, plan = setup.model, setup.plan
    heads = plan.micro_batch * model.num_heads // plan.tp
    q, k = setup.local_seq, setup.seq_len
    score = Gemm(q, k, model.qk_head_dim, heads)
    value = Gemm(q, model.v_head_dim, k, heads)
    fwd = gemm_time_s(score, acc, dtype) + gemm_time_s(value, acc, dtype)
    e = setup.act_bytes
    softmax_bytes = q * k * heads * (2 * e + ((2 * e + 1) if model.dropout else 0))
    fwd_mem = elementwise_time_s(softmax_bytes, acc)
    return fwd + fwd_mem, 2 * fwd + 2 * fwd_mem


def _ep_pass_s(setup: Setup) -> float:
    """Dispatch plus combine all-to-all of one pass."""
    plan, model = setup.plan, setup.model
    if not model.moe or plan.ep == 1:
        return 0.0
    link = coll.group_link(setup.cluster, plan.ep, plan.tp)
    send = setup.act_bytes * setup.tokens * model.moe.top_k * model.hidden_size
    return 2 * coll.all_to_all_s(send, link)


@direct_init
@dataclass(frozen=True)
class AttentionPart:
    """What a dense and an MoE layer of one plan share: the attention block's GEMMs and their summed times, the
    attention core, the TP collectives of a pass and the CP exchange (computed once per plan, :func:`attention_part`)."""

    gemms: list[Gemm]
    gemm_fwd_s: float
    gemm_bwd_s: float
    core_fwd_s: float
    core_bwd_s: float
    tp_comm_s: float
    cp_fwd_s: float
    cp_bwd_s: float


def attention_part(setup: Setup) -> AttentionPart:
    """The attention block's share of a layer's cost (:class:`AttentionPart`)."""
    gemms = attention_gemms(setup)
    gemm_fwd, gemm_bwd = gemms_fwd_bwd_s(gemms, setup)
    core_fwd, core_bwd = _attention_core_s(setup)
    cp_fwd, cp_bwd = cp_exchange_s(setup, core_fwd, core_bwd)
    return AttentionPart(gemms, gemm_fwd, gemm_bwd, core_fwd, core_bwd,
                         tp_comm_s(setup) if setup.plan.tp > 1 else 0.0, cp_fwd, cp_bwd)


def layer_cost(setup: Setup, moe_layer: bool, attention: AttentionPart | None = None) -> LayerCost:
    """Cost of one layer (compute and the collectives inside it); ``attention``: :func:`attention_part` of
    ``setup``, when the caller has it."""
    plan, acc = setup.plan, setup.cluster.accelerator
    attention = attention or attention_part(setup)
    mlp = mlp_block_gemms(setup, moe_layer)
    gemms = attention.gemms + mlp
    gemm_fwd, gemm_bwd = gemms_fwd_bwd_s(mlp, setup, start=(attention.gemm_fwd_s, attention.gemm_bwd_s))
    core_fwd, core_bwd = attention.core_fwd_s, attention.core_bwd_s
    elem_fwd = elementwise_time_s(_elementwise_bytes_fwd(setup, gemms, moe_layer), acc)
    eff = acc.efficiency  # eager per-op dispatch, measured by plait calibrate on CPUs; 0 on GPUs (HIDDEN_HOST)
    merge_fwd, merge_bwd = (elementwise_time_s(b, acc) for b in cp_merge_bytes(setup))
    quant_fwd, quant_bwd = (elementwise_time_s(b, acc) for b in quantize_extra_bytes(setup, gemms))  # fp8 recipe
    fwd = gemm_fwd + core_fwd + elem_fwd + quant_fwd + merge_fwd + eff.host_layer_fwd_us.value * 1e-6
    bwd = gemm_bwd + core_bwd + 2 * elem_fwd + quant_bwd + merge_bwd + eff.host_layer_bwd_us.value * 1e-6
    if moe_layer:  # the MoE block's small kernels at their floor and its fp8 padding copies (plait.cost.moe_block)
        floor_fwd, floor_bwd = moe_floor_s(setup)
        padding = elementwise_time_s(fp8_padding_bytes(setup), acc)
        fwd, bwd = fwd + floor_fwd + padding, bwd + floor_bwd + padding
    if moe_layer and setup.framework.moe_host_sync:  # a host that syncs in the layer's forward cannot run ahead of it
        attention_fwd = attention.gemm_fwd_s + core_fwd  # (plait.cost.host)
        fwd = moe_forward_s(setup, fwd, attention_fwd)
    chunk_fwd = chunk_bwd = 0.0
    if plan.tp_comm_overlap and plan.tp > 1:  # decomposed GEMMs: tp chunks of 1/tp of the tokens each
        chunked = [Gemm(max(g.m // plan.tp, 1), g.n, g.k, g.count * plan.tp) for g in gemms]
        split_fwd, split_bwd = gemms_fwd_bwd_s(chunked, setup)
        chunk_fwd, chunk_bwd = max(0.0, split_fwd - gemm_fwd), max(0.0, split_bwd - gemm_bwd)
    comm = attention.tp_comm_s  # the same collectives forward and backward
    if plan.overlap_chunks > 1 and plan.tp > 1:  # chunked collectives beside chunked GEMMs (plait.cost.chunked)
        tp_fwd, tp_bwd = tp_chunked_s(setup, attention.gemms, None if moe_layer else mlp)
    else:
        tp_fwd, tp_bwd = tp_pass_s(setup, gemm_fwd, chunk_fwd, comm), tp_pass_s(setup, gemm_bwd, chunk_bwd, comm)
    if plan.tp > 1:  # wrapper host time (DTensor dispatch), measured by plait calibrate; 0 on GPUs
        tp_fwd += eff.host_tp_layer_fwd_us.value * 1e-6
        tp_bwd += eff.host_tp_layer_bwd_us.value * 1e-6
    cp_fwd, cp_bwd = attention.cp_fwd_s, attention.cp_bwd_s
    ep = ep_bwd = _ep_pass_s(setup) if moe_layer else 0.0
    if moe_layer and ep and plan.overlap_chunks > 1:
        ep, ep_bwd = ep_chunked_s(setup, mlp[1:3])  # moe_gemms: router, then the routed experts' two
    if plan.recompute == "full":
        recompute = fwd + tp_fwd + cp_fwd + ep - early_stop_saved_s(setup, mlp, moe_layer)
    elif plan.recompute == "selective" and setup.framework.selective_policy == "every_other_mm":
        recompute = op_sac.recompute_s(setup, moe_layer, elem_fwd, core_fwd, ep, tp_fwd, cp_fwd)
    elif plan.recompute == "selective":
        recompute = core_fwd
    else:
        recompute = 0.0
    return LayerCost(fwd, bwd, recompute, tp_fwd, tp_bwd, cp_fwd, cp_bwd, ep, ep_bwd)

