"""What non-reentrant activation checkpointing with early stop does not recompute.

PyTorch's non-reentrant ``torch.utils.checkpoint`` recomputes a checkpointed block when its backward first unpacks
a saved tensor, and by default (pytorch/pytorch PR #96866, 2023-03, in PyTorch 2.1: "non-reentrant checkpoint stops
recomputation as soon as it has computed all needed Tensors", ``set_checkpoint_early_stop`` in
torch/utils/checkpoint.py) it stops at the pack of the last tensor the original forward saved. An ATen op's
autograd wrapper saves its inputs before it runs its kernel (the generated ``VariableType`` code builds each input's
``SavedVariable``, which calls the pack hook, before the redispatch), so the block's last GEMM, whose inputs are the
last tensors saved, is stopped before its kernel, and the residual add after it saves nothing and never runs. A
dense transformer block that ends ``x + down_proj(act(up_proj(norm(x))))`` (MPT's ``MPTBlock`` and ``MPTMLP``,
llm-foundry v0.3.0 llmfoundry/models/layers/blocks.py and ffn.py) therefore recomputes all but its MLP down
projection and its second residual add.

A GEMM inside a ``torch.autograd.Function`` (Transformer Engine's fp8 ``Linear``) saves with
``ctx.save_for_backward`` after its forward has run, so there the last GEMM is recomputed; an MoE block ends in the
combine of its experts' outputs, which this rule does not split, so it is recomputed whole. Under tensor parallelism
the down projection's all-reduce would be skipped too; it is still counted (the engines with this fact do not run
tensor parallelism).
"""

from __future__ import annotations

from plait.cost.compute import elementwise_time_s, roofline_of
from plait.cost.flops import Gemm
from plait.cost.setup import Setup


def early_stop_saved_s(setup: Setup, mlp: list[Gemm], moe_layer: bool) -> float:
    """Forward seconds of one layer that full recomputation skips under early stop (module docstring): the MLP's
    down projection, ``mlp[-1]`` (:func:`plait.cost.flops.mlp_gemms`), unless the GEMMs run in fp8, and the
    residual add after it (reads two ``tokens x hidden`` tensors and writes one, at the residual stream's bytes);
    0 where the engine recomputes whole blocks or the layer is an MoE layer."""
    if not setup.framework.recompute_early_stop or moe_layer:
        return 0.0
    acc = setup.cluster.accelerator
    stream = setup.tokens * setup.model.hidden_size / (setup.plan.tp if setup.plan.sp else 1)
    saved = elementwise_time_s(3 * setup.residual_bytes * stream, acc)
    if setup.gemm_dtype != "fp8":
        down = mlp[-1]
        saved += roofline_of(acc, setup.gemm_dtype).time_s(down.m, down.n, down.k, down.count)
    return saved
