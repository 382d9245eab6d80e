"""Device work of a Megatron-Core MoE block that :mod:`plait.cost.layer`'s GEMMs and bytes leave out.

Small kernels. :mod:`plait.cost.layer` times a layer's memory-bound work by its bytes alone (:func:`plait.cost.
compute.elementwise_time_s`), summed over the layer, and each GEMM by its roofline with a floor of one kernel per
product (:meth:`plait.cost.compute._Roofline.time_s`). A kernel whose bytes are few still takes the accelerator's
``kernel_launch_us`` on the device (efficiency.toml: "minimum time of one GPU kernel", launch and tail; the same
figure that floors the GEMMs), so a block of many small kernels runs longer than its bytes say (Williams, Waterman &
Patterson 2009's roofline, per kernel: the larger of its memory time and its floor). A Megatron-Core MoE block is
such a block (docs/research/moe_costs.md section 2):

- its fixed kernels besides the experts' (router, top-k and score, auxiliary loss, token counts, the count
  all-gather's preprocessing; :attr:`~plait.engine.facts.EngineFacts.moe_launches_fixed`, half per pass) work on
  ``tokens x experts`` scores or on counts, bytes :mod:`plait.cost.layer` does not charge, except the ones that move
  the tokens, whose bytes it does charge: permute, un-permute and the activation, and with more than one local expert
  behind an expert-parallel all-to-all the regrouping by local expert and back (:func:`streaming_kernels`). Those
  run at their bytes; the others at the floor each. Megatron-Core's own count of the router part of one layer's
  forward, with the fused router kernels the Megatron-Bridge recipes turn on (``moe_router_fusion``), is 31
  kernels ("reducing the total number of kernels in the router part from 72 to 31", NVIDIA/Megatron-LM
  docs/discussions/deepseek-v3-gb200-optimization/deepseek-v3-gb200-optimization.md, section 2.1.4), of the order
  of the 30 per pass the engine counts;
- Transformer Engine 2.9 quantizes each local expert's input and output gradient by its own kernels (``split_quantize``
  runs "Quantize kernels individually", a loop over experts, csrc/extensions/cast.cpp L145-148;
  :func:`plait.cost.host.fp8_quantize_kernels` per tensor, :attr:`~plait.engine.facts.EngineFacts.
  moe_quantized_per_expert` tensors per expert): each of a tensor's kernels takes the larger of its share of the
  cast bytes :mod:`plait.cost.layer` charges (:data:`CAST_BYTES_PER_ELEMENT` plus the recipe's extra,
  :func:`plait.cost.fp8_recipe.extra_bytes_per_element`) and the floor; current scaling's scale kernel moves nothing
  and runs at the floor whatever the tensor's size. The expert GEMMs are floored by their roofline already.

fp8 padding copies. In an fp8 run Megatron-Core's ``TEGroupedMLP`` pads every local expert's rows to the fp8 GEMM's
alignment (16 rows, 32 for MXFP8) by copying its input tokens into a padded buffer (``Fp8Padding``) and copies its
output back (``Fp8Unpadding``; experts.py @0d8e0714 L880-887, L977-978). Transformer Engine skips the copy only when
every expert's count is already aligned (TE 2.9 module/fp8_padding.py L121-122), which dropless routing does not
give: Megatron-Bridge's benchmark routing draws each token's experts at random (``moe_router_force_load_balancing``,
docs/research/moe_costs.md section 4), so the counts scatter around their mean. Each copy reads and writes every routed
token's hidden state; the backward runs the mirror copies on the gradients (``fused_multi_row_unpadding`` and
padding, fp8_padding.py L53-68). Where the dispatcher pads as it permutes (HybridEP) nothing is copied
(:attr:`~plait.engine.facts.EngineFacts.moe_fp8_padding`).
"""

from __future__ import annotations

from plait.cost.compute import memory_bytes_per_s
from plait.cost.fp8_recipe import AMAX_READ_BYTES, extra_bytes_per_element
from plait.cost.host import fp8_quantize_kernels
from plait.cost.setup import Setup

CAST_BYTES_PER_ELEMENT = 3
"""One fused bf16-to-fp8 cast reads 2 bytes and writes 1 per element (as :mod:`plait.cost.layer` charges it)."""


def streaming_kernels(setup: Setup) -> int:
    """Kernels of one MoE pass that move the routed tokens, whose bytes :mod:`plait.cost.layer` charges: the permute,
    the activation and the un-permute, plus the regrouping by local expert and back where an expert-parallel
    all-to-all delivers the tokens of more than one local expert (Megatron-Core ``token_dispatcher.py`` @0d8e0714,
    ``sort_chunks_by_idxs`` L740, L775)."""
    moe, ep = setup.model.moe, setup.plan.ep
    assert moe is not None
    return 3 + (2 if ep > 1 and moe.num_experts // ep > 1 else 0)


def _quantize_floor_s(setup: Setup, elements: float, floor_s: float, bytes_per_s: float) -> float:
    """Seconds one per-expert quantization of ``elements`` runs beyond the bytes charged for it, kernel by kernel:
    MXFP8's one kernel moves all of them; current scaling's amax kernel reads the tensor (its bytes charged where the
    run states the recipe, :data:`plait.cost.fp8_recipe.AMAX_READ_BYTES`), its scale kernel computes one value and
    moves nothing, and its cast moves the rest (TE 2.9 csrc/quantizer.cpp L497-536). Each kernel takes the larger
    of its bytes' time and the floor."""
    kernels = fp8_quantize_kernels(setup)
    if not kernels:
        return 0.0
    charged_s = (CAST_BYTES_PER_ELEMENT + extra_bytes_per_element(setup)) * elements / bytes_per_s
    if kernels == 1:
        return max(0.0, floor_s - charged_s)
    amax_s = (AMAX_READ_BYTES if extra_bytes_per_element(setup) else 0) * elements / bytes_per_s
    per_kernel = (amax_s, 0.0, charged_s - amax_s)  # amax, scale, cast
    return sum(max(floor_s, t) for t in per_kernel) - charged_s


def moe_floor_s(setup: Setup) -> tuple[float, float]:
    """Forward and backward device seconds one MoE block's small kernels take beyond the bytes charged for them, for
    one micro-batch on one rank (module docstring): the fixed kernels that move no tokens at one floor each, and per
    local expert its quantizations' floors beyond their bytes, the two GEMM inputs forward (``tokens x hidden`` and
    ``tokens x expert width``) and the two output gradients backward (``tokens x hidden`` and ``tokens x up width``)."""
    model, plan, framework = setup.model, setup.plan, setup.framework
    moe = model.moe
    if moe is None or not framework.moe_launches_fixed:
        return 0.0, 0.0
    acc = setup.cluster.accelerator
    floor_s, bytes_per_s = acc.efficiency.kernel_launch_us.value * 1e-6, memory_bytes_per_s(acc)
    fixed = max(0.0, framework.moe_launches_fixed / 2 - streaming_kernels(setup)) * floor_s
    experts = moe.num_experts // plan.ep
    tokens = max(setup.tokens * moe.top_k * plan.ep // moe.num_experts, 1)  # per local expert, balanced routing
    width = moe.expert_ffn_hidden_size // plan.tp
    ups = 2 if model.mlp == "gated" else 1
    fwd = bwd = fixed
    if framework.moe_quantized_per_expert:
        fwd += experts * (
            _quantize_floor_s(setup, tokens * model.hidden_size, floor_s, bytes_per_s)
            + _quantize_floor_s(setup, tokens * width, floor_s, bytes_per_s)
        )
        bwd += experts * (
            _quantize_floor_s(setup, tokens * model.hidden_size, floor_s, bytes_per_s)
            + _quantize_floor_s(setup, tokens * ups * width, floor_s, bytes_per_s)
        )
    return fwd, bwd


def fp8_padding_bytes(setup: Setup) -> float:
    """HBM bytes of one pass's fp8 padding copies (module docstring), the same forward and backward: two copies of
    every routed token's hidden state, each read and written, ``4 x act_bytes x tokens x top_k x hidden``; 0 unless
    the run is fp8 and its engine's experts pad (:attr:`~plait.engine.facts.EngineFacts.moe_fp8_padding`). The
    probabilities padded beside the tokens (one value per routed token) and the padding rows themselves (under the
    alignment per expert) are left out."""
    moe = setup.model.moe
    if moe is None or setup.gemm_dtype != "fp8" or not setup.framework.moe_fp8_padding:
        return 0.0
    return 4.0 * setup.act_bytes * setup.tokens * moe.top_k * setup.model.hidden_size
