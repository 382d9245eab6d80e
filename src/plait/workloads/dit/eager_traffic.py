"""Device traffic of an eager block's pointwise kernels beyond one bf16 read and write of the block's width.

:func:`plait.workloads.dit.pipeline.pointwise_step_s` charges every unfused kernel of an eager block one read and one
write of a ``tokens x H`` bf16 activation (the roofline of a streaming kernel: Williams et al., CACM 2009). Three
kinds of kernel move more than that, read off the forward code the rows run:

- **A rotary embedding in fp32.** diffusers' ``apply_rotary_emb`` (``models/embeddings.py``, ``use_real=True``,
  ``use_real_unbind_dim=-1``, the path of FLUX.1, CogVideoX and ConsisID) computes ``(x.float() * cos +
  x_rotated.float() * sin).to(x.dtype)`` on Q and on K: two casts up (2 B read, 4 B written a value), two products
  with the fp32 ``cos``/``sin`` table (4 B read, 4 B written; the ``S x d`` table is one head's width and stays in
  L2 across the heads), their sum (8 B read, 4 B written) and the cast down (4 B read, 2 B written)
  (:data:`ROTARY_FP32_KERNEL_BYTES`). The model files count these kernels, so the extra is what they move beyond
  4 B a value each (:data:`ROTARY_FP32_EXTRA_BYTES`).
- **The MLP's activation on its inner width.** A plain MLP (``Linear(H, rH)``, GELU, ``Linear(rH, H)``; diffusers'
  ``FeedForward`` with ``gelu-approximate``, FLUX.1's ``act_mlp`` in its single-stream blocks) runs the activation
  on the ``r H``-wide output of the first GEMM: ``2 (r - 1) H`` more values read and written per token than a kernel
  of the block's width. An mmdit single-stream block then joins the attention output and that activation
  (diffusers' ``FluxSingleTransformerBlock``: ``torch.cat([attn_output, mlp_hidden_states], dim=2)``; HunyuanVideo's
  ``MMSingleStreamBlock``: ``torch.cat((attn, self.mlp_act(mlp)), 2)``), a ``(1 + r) H``-wide copy: ``2 r H`` more.
  A gated MLP (``mlp`` ``swiglu`` or ``glumbconv``) runs its activation on the ``r H``-wide gate and multiplies it
  into the other half (diffusers' ``SwiGLU``: ``hidden_states * self.activation(gate)``, Mochi 1's MLP in
  ``MochiTransformerBlock``): ``2 r H`` values read and written by the activation, ``3 r H`` by the product, against
  the ``2 x 2 H`` of two
  kernels of the block's width (Mochi's eager count is assumed FLUX.1's, which has one: the product's launch is
  left out there, its traffic is not). Sana's GLUMBConv (``mlp = "glumbconv"``; diffusers ``GLUMBConv.forward``) also
  runs SiLU on the whole ``2 r H``-wide output of its first 1x1 convolution before the depthwise one: ``4 r H``
  against ``2 H``.
- **Batched linear attention's layout copies.** Sana's linear attention without sequence parallelism (xDiT's
  ``xFuserSanaLinearAttnProcessor2_0``, diffusers' ``SanaLinearAttnProcessor2_0``) multiplies ``key.transpose(-2,
  -1) @ value`` and ``query @ scores`` on fp32 Q and K laid out ``(B, tokens, heads, d)`` and viewed ``(B, heads,
  tokens, d)``. ``torch.matmul`` reshapes each operand's batch dimensions into one for ``bmm``
  (``tensor1.expand(...).reshape({expand_batch_product, n, m1})``, ``_matmul_impl`` in PyTorch's
  aten/src/ATen/native/LinearAlgebra.cpp): with one image per forward the size-1 batch merges into a view, with the
  conditional and unconditional passes batched together ``(B, heads)`` cannot, and K and Q are copied in fp32 first,
  4 B read and 4 B written a value each (:data:`LINEAR_BATCH_COPY_BYTES`; their two launches a block, under 1 ms a
  step, are left out). xDiT's sequence-parallel path permutes and copies Q, K and V explicitly whatever the batch
  (``xdit_sana_ring_flash_attn_forward``), within the block's counted kernels.

Other kernels stay at one read and write of the block's width (an underestimate where a kernel upcasts, as the
RMSNorms of Q and K do). Compiled runs fuse all of these (``pointwise_step_s`` is 0 there).
"""

from __future__ import annotations

from plait.workloads.dit.cost import DitPlan
from plait.workloads.dit.model import ACT_BYTES, JOINED, DitJob, DitSpec

ROTARY_FP32_KERNEL_BYTES = (2 + 4, 4 + 4, 2 + 4, 4 + 4, 8 + 4, 4 + 2)
"""Bytes per value of Q (or K) read and written by the fp32 kernels of diffusers' ``apply_rotary_emb`` (module
docstring): ``x.float()``, ``* cos``, ``x_rotated.float()``, ``* sin``, the sum, ``.to(x.dtype)``."""
ROTARY_FP32_EXTRA_BYTES = sum(ROTARY_FP32_KERNEL_BYTES) - 2 * ACT_BYTES * len(ROTARY_FP32_KERNEL_BYTES)
"""What those kernels move per value beyond the bf16 read and write each is already charged: 46 - 24 = 22 B."""
LINEAR_BATCH_COPY_BYTES = 2 * (4 + 4)
"""Bytes per value of the block's width a batched linear attention's two fp32 copies (K, then Q) move (module
docstring)."""


def rotated_tokens(spec: DitSpec, job: DitJob) -> int:
    """Tokens whose Q and K the fp32 rotary embedding rotates, per pass (:attr:`DitSpec.rotary_fp32`)."""
    image = job.image_tokens(spec)
    if spec.rotary_fp32 == "image":
        return image
    if spec.rotary_fp32 == "all":
        return image + (spec.text_tokens if spec.kind in JOINED else 0)
    return 0


def extra_step_bytes(spec: DitSpec, job: DitJob, plan: DitPlan) -> float:
    """Bytes one GPU's eager pointwise kernels move in one step beyond one bf16 read and write of the block's width
    each (module docstring): the fp32 rotary embedding on Q and K of every attention layer, and the plain MLP's
    activation on its ``r H``-wide input in every block (mmdit double-stream blocks: one MLP per stream, each on its
    own tokens; single-stream blocks one on the joined sequence, and their concatenation), and a batched linear
    attention's fp32 copies of K and Q."""
    share = plan.ulysses * plan.ring * plan.distrifusion * plan.pipefusion  # tokens split; layers split by stage
    passes = job.passes / plan.cfg
    width = spec.hidden / plan.tp
    image = job.image_tokens(spec)
    rotary = spec.attention_layers * 2 * rotated_tokens(spec, job) * width * ROTARY_FP32_EXTRA_BYTES
    seq = image + (spec.text_tokens if spec.kind in JOINED else 0)
    mlp_tokens = spec.layers * (seq if spec.kind in JOINED else image) + spec.single_layers * seq
    r = spec.mlp_ratio
    if spec.mlp != "plain":  # the gate's activation and the product; GLUMBConv's SiLU on the whole first output
        values = (5 * r - 4) + ((4 * r - 2) if spec.mlp == "glumbconv" else 0)
    else:  # the activation on the r H-wide input
        values = 2 * (r - 1)
    mlp = mlp_tokens * values * width * ACT_BYTES
    mlp += spec.single_layers * seq * 2 * r * width * ACT_BYTES  # the single block's concatenation
    copies = 0.0
    if spec.kind == "linear" and passes > 1 and plan.ulysses * plan.ring == 1:  # passes batched in one forward
        copies = spec.attention_layers * image * width * LINEAR_BATCH_COPY_BYTES
    return (rotary + mlp + copies) / share * passes
