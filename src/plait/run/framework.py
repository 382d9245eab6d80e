"""How plait's own runtime implements a plan, as the cost model's :class:`Framework` (no PyTorch needed).

Plans without FSDP run under ``torch.autocast`` with fp32 parameters (plait/run/train.py), so the
residual stream and its norms stay fp32; FSDP2 plans cast parameters to bf16 through their
``MixedPrecisionPolicy`` (plait/run/parallel.py), so activations are bf16 throughout. Under tensor
parallelism the output projection gathers the full logits before the loss (plait/run/parallel.py,
``ColwiseParallel(output_layouts=Replicate())``). Grouped K/V heads are copied out to the query heads with
``repeat_interleave`` before attention, and the norms, rotary embedding and SwiGLU run op by op in eager
PyTorch (plait/run/model.py: ``nn.RMSNorm``, ``apply_rope``, ``silu(w1 x) * w3 x``; no ``torch.compile``).
"""

from __future__ import annotations

from plait.cost.framework import Framework
from plait.plan.plan import Plan


def runtime_framework(plan: Plan) -> Framework:
    """The Framework that describes ``plait run`` executing ``plan``."""
    fsdp_mixed_precision = plan.dp > 1 and plan.sharding in ("zero2", "zero3")
    return Framework(residual_bytes=2 if fsdp_mixed_precision else 4, tp_loss="gathered", kv_repeat=True,
                     pointwise="eager")
