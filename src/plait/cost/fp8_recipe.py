"""What Transformer Engine's fp8 recipes add to quantizing a GEMM input, beyond one fused cast.

:mod:`plait.cost.layer` charges every fp8 GEMM input one cast, read 2 bytes and write 1 per element (Micikevicius
et al. 2022, Sec. 4). Transformer Engine 2.9 does more, by recipe (docs/research/moe_costs.md section 6, read from
``transformer_engine/pytorch/csrc/quantizer.cpp`` and ``common/transformer_engine.cpp``):

- Per-tensor current scaling (Megatron-Bridge "FP8-CS") runs three kernels per tensor, amax, scale and cast
  (``Float8CurrentScalingQuantizer::quantize``, quantizer.cpp L497-536): the amax kernel reads the bf16 tensor once
  more before the cast can start, 2 bytes per element. On GPUs whose fp8 GEMMs take only the TN layout (Hopper;
  ``with_transpose = columnwise_usage && !nvte_is_non_tn_fp8_gemm_supported()``, quantizer.cpp L340, true on
  SM100-119 only, transformer_engine.cpp L719-727) the cast also writes a transposed copy for the weight-gradient
  GEMM, 1 byte.
- MXFP8 (Blackwell, "FP8-MX") runs one kernel (``nvte_quantize_v2``, L1091-1103) that writes a rowwise and a
  columnwise fp8 copy ("For MXFP8, the columnwise data doesn't need transpose", cast.cpp L429), 1 byte more, and an
  E8M0 scale per 32 elements for each, 2/32 bytes.

The tensors quantized per GEMM: its input in the forward (``m x k``), its output gradient in the backward
(``m x n``), each used by both backward GEMMs (so both usages are written). Weights are left out: Megatron keeps
their fp8 copies across micro-batches (``fp8_weight_cache_bytes``). An unstated recipe (``"by_accelerator"``) adds
nothing here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from plait.cost.flops import Gemm
from plait.cost.setup import Setup

AMAX_READ_BYTES = 2
"""The current-scaling amax pass reads each bf16 element once (quantizer.cpp L497-536)."""
COLUMNWISE_COPY_BYTES = 1
"""A second fp8 copy (transposed on Hopper, columnwise MXFP8 on Blackwell), one byte per element."""
MX_BLOCK = 32
"""Elements per MXFP8 scale (one E8M0 byte each), for each of the rowwise and columnwise copies."""


def recipe(setup: Setup) -> Literal["current", "mxfp8"]:
    """The recipe an fp8 run quantizes with: the engine's where stated, else MXFP8 on the accelerators with an fp4
    peak (Blackwell) and per-tensor current scaling before them."""
    stated = setup.framework.fp8_recipe
    if stated != "by_accelerator":
        return stated
    return "mxfp8" if "fp4" in setup.cluster.accelerator.peak_tflops else "current"


def extra_bytes_per_element(setup: Setup) -> float:
    """HBM bytes per quantized bf16 element beyond the one fused cast (module docstring); 0 unless the run is fp8
    with a stated recipe."""
    if setup.gemm_dtype != "fp8" or setup.framework.fp8_recipe == "by_accelerator":
        return 0.0
    if recipe(setup) == "mxfp8":
        return COLUMNWISE_COPY_BYTES + 2 / MX_BLOCK
    tn_only = "fp4" not in setup.cluster.accelerator.peak_tflops  # non-TN fp8 GEMMs from SM100 (Blackwell) on
    return AMAX_READ_BYTES + (COLUMNWISE_COPY_BYTES if tn_only else 0)


def quantize_extra_bytes(setup: Setup, gemms: Sequence[Gemm]) -> tuple[float, float]:
    """Forward and backward bytes the recipe adds to one layer's GEMMs for one micro-batch: its extra bytes per
    element over every GEMM input (forward) and every GEMM output gradient (backward)."""
    per_element = extra_bytes_per_element(setup)
    if not per_element:
        return 0.0, 0.0
    inputs = sum(g.m * g.k * g.count for g in gemms)
    output_grads = sum(g.m * g.n * g.count for g in gemms)
    return per_element * inputs, per_element * output_grads
