"""Device time of the small kernels of a dropless MoE block: each runs at least one kernel's minimum time.

:mod:`plait.cost.layer` times a layer's memory-bound work by its bytes alone (:func:`plait.cost.compute.
elementwise_time_s`), summed over the layer, and each GEMM by its roofline with a floor of one kernel per product
(:meth:`plait.cost.compute._Roofline.time_s`). A kernel whose bytes are few still takes the accelerator's
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
  moe_quantized_per_expert` tensors per expert): a tensor of ``tokens per expert x width`` elements takes the
  larger of its cast bytes' time (:data:`CAST_BYTES_PER_ELEMENT` plus the recipe's extra,
  :func:`plait.cost.fp8_recipe.extra_bytes_per_element`, as :mod:`plait.cost.layer` charges them) and its kernels'
  floors. The expert GEMMs are floored by their roofline already.

What this adds is the floors beyond the bytes already charged, forward and backward, per micro-batch.
"""

from __future__ import annotations

from plait.cost.compute import memory_bytes_per_s
from plait.cost.fp8_recipe import extra_bytes_per_element
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
    """Seconds one per-expert quantization of ``elements`` runs beyond its bytes' time (0 when the bytes dominate)."""
    kernels = fp8_quantize_kernels(setup)
    if not kernels:
        return 0.0
    bytes_s = (CAST_BYTES_PER_ELEMENT + extra_bytes_per_element(setup)) * elements / bytes_per_s
    return max(0.0, kernels * floor_s - bytes_s)


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
