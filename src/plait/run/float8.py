"""fp8 training of the linear layers through torchao's Float8Linear (``plan.precision == "fp8"``).

References: torchao.float8 (``convert_to_float8_training``, ``Float8LinearConfig``), tensorwise dynamic
scaling (Micikevicius et al. 2022, "FP8 Formats for Deep Learning": e4m3 forward, e5m2 gradients); the
module filter and the order (convert before TP and FSDP) follow torchtitan
(torchtitan/components/quantization/float8.py and utils.py ``module_filter_fn``: every dim a multiple of 16,
the output projection left in high precision as torchtitan's ``filter_fqns=["lm_head"]`` does).

FSDP2's float8 all-gather (``enable_fsdp_float8_all_gather``) stays off: parameters are gathered in bf16 and
cast per GEMM, so no scale precompute after the optimizer step is needed. Under TP the plain DTensor styles
of plait/run/parallel.py shard Float8Linear like nn.Linear; the casts run on each rank's shard.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from plait.errors import ConfigError
from plait.plan.plan import Plan

FP8_DIM_MULTIPLE = 16  # fp8 tensor-core GEMMs need dims that are multiples of 16 (torchtitan module_filter_fn)
MIN_CAPABILITY = (8, 9)  # Ada/Hopper, the first NVIDIA fp8 tensor cores (torchtitan has_cuda_capability(8, 9))
SKIPPED = ("output", "router")  # output projection bf16 (torchtitan filter_fqns=["lm_head"]); MoE router too
ROUTED_EXPERTS = "experts"  # torchtitan runs routed experts through its grouped-GEMM converter, never as Linear


@functools.cache
def cpu_scaled_mm_works() -> bool:
    """Whether ``torch._scaled_mm`` (the GEMM Float8Linear calls) runs on this PyTorch's CPU backend.

    PyTorch 2.13's CPU build runs it (seen 2026-12-01); a build without a CPU kernel raises. Probed once, 16x16."""
    a = torch.ones(16, 16).to(torch.float8_e4m3fn)
    b = torch.ones(16, 16).to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0)
    try:
        out = torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError):
        return False
    return bool(torch.all(out == 16))


def check_float8(plan: Plan, on_gpu: bool, capability: tuple[int, int] | None = None) -> None:
    """Refuse fp8 where torchao's Float8Linear cannot run: a GPU older than sm89, or a CPU build without
    ``torch._scaled_mm``. ``capability`` defaults to the current CUDA device's."""
    if plan.precision != "fp8":
        return
    if not on_gpu:
        if not cpu_scaled_mm_works():
            raise ConfigError("precision=fp8: torch._scaled_mm does not run on this PyTorch's CPU and this "
                              "machine has no GPU")
        return
    major, minor = capability if capability is not None else torch.cuda.get_device_capability()
    if (major, minor) < MIN_CAPABILITY:
        raise ConfigError(f"precision=fp8 needs fp8 tensor cores (compute capability >= 8.9); this GPU is "
                          f"sm{major}{minor}")


def convertible(module: nn.Module, fqn: str, tp: int) -> bool:
    """torchao's ``module_filter_fn``: a linear layer other than the output projection, an MoE router or
    a routed expert, whose dims, and every TP shard of them, are multiples of 16."""
    names = fqn.split(".")
    if not isinstance(module, nn.Linear) or names[-1] in SKIPPED or ROUTED_EXPERTS in names:
        return False
    multiple = FP8_DIM_MULTIPLE * tp  # column- and row-wise shards divide one dim by tp
    return module.in_features % multiple == 0 and module.out_features % multiple == 0


def convert_to_float8(model: nn.Module, plan: Plan) -> int:
    """Swap the convertible ``nn.Linear`` layers of ``model`` for torchao ``Float8Linear`` (tensorwise
    dynamic scaling) in place, before TP and FSDP wrap them. Returns the number of layers swapped."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    from torchao.float8.float8_linear import Float8Linear

    config = Float8LinearConfig.from_recipe_name("tensorwise")
    assert not config.enable_fsdp_float8_all_gather  # see the module docstring
    convert_to_float8_training(model, config=config,
                               module_filter_fn=lambda module, fqn: convertible(module, fqn, plan.tp))
    return sum(isinstance(m, Float8Linear) for m in model.modules())
