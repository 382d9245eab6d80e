"""An AdamW step that updates each parameter tensor with separate eager ops: the bytes it streams per parameter.

plait's default optimizer step (:func:`plait.cost.dataparallel.optimizer_step_s`) is one fused pass: it reads the
gradient, reads and writes the fp32 master weights and both moments, and writes the 16-bit copy. Composer's
``DecoupledAdamW`` (mosaicml/composer v0.13.4 and v0.16.4, composer/optim/decoupled_weight_decay.py,
``DecoupledAdamW.adamw``; the optimizer of llm-foundry's MPT benchmark configs, ``optimizer.name:
decoupled_adamw`` with ``weight_decay: 0.0`` in scripts/train/yamls/pretrain/mpt-*.yaml @b2a43a14 and
mosaic_gpt/*.yaml @300cc5c5) instead loops over the parameters and runs, for each, the eager ops
of :data:`COMPOSER_ADAMW_OPS`, each its own elementwise kernel over the whole tensor. Under Composer's FSDP1 every
tensor the loop touches is fp32: the sharded flat parameter (FSDP1 keeps it in its original dtype and casts only the
gathered copy), its gradient shard (cast to the parameter's dtype after the reduce-scatter) and both moments
(``torch.zeros_like(p)``). The step then streams :data:`COMPOSER_ADAMW_BYTES_PER_PARAM` bytes per local parameter
at the sustained memory bandwidth, the same rule as the fused pass.
"""

from __future__ import annotations

FP32_BYTES = 4

COMPOSER_ADAMW_OPS: tuple[tuple[str, int, int], ...] = (
    ("exp_avg.mul_(beta1)", 1, 1),
    (".add_(grad, alpha=1 - beta1)", 2, 1),
    ("exp_avg_sq.mul_(beta2)", 1, 1),
    (".addcmul_(grad, grad, value=1 - beta2)", 2, 1),
    ("exp_avg_sq.sqrt()", 1, 1),
    ("/ math.sqrt(bias_correction2)", 1, 1),
    (".add_(eps)", 1, 1),
    ("param.addcdiv_(exp_avg, denom, value=-step_size)", 3, 1),
)
"""(op, fp32 tensors read, fp32 tensors written) of each parameter's update in ``DecoupledAdamW.adamw`` (v0.16.4
@1c9d8d17 L252-264; v0.13.4 @d80c37dc the same ops, L263-275), with ``weight_decay`` 0 so ``param.mul_`` is skipped
(L244-246). ``addcmul_`` is counted reading ``grad`` once from memory (both operands are the same tensor)."""

COMPOSER_ADAMW_BYTES_PER_PARAM = FP32_BYTES * sum(reads + writes for _, reads, writes in COMPOSER_ADAMW_OPS)
"""Bytes per parameter of one ``DecoupledAdamW`` step."""
