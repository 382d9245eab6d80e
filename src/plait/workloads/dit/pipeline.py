"""One generation end to end: the text encoders, the denoising loop on its GPUs (:mod:`plait.workloads.dit.cost`) with
the host's time per step, and the VAE decoder. What a user waits for from prompt to pixels.

- **What does not parallelise.** The text encoders run once (both prompts with classifier-free guidance) and the VAE
  decoder once per output, each on one GPU (:mod:`plait.workloads.dit.components`): more GPUs shorten only the
  denoising loop, so these set the floor of the latency (Amdahl, AFIPS 1967).
- **The host.** Every kernel of a step is launched from Python: ``host_launch_us`` per kernel (the accelerator's
  efficiency figure, with its source), and in eager PyTorch the framework's time before each launch,
  ``eager_dispatch_us`` (:mod:`plait.hardware.eager_dispatch`; both :func:`plait.cost.host.issue_s`). Eager PyTorch launches what the block's forward code
  calls (``eager_kernels`` per block, counted in the model file); ``torch.compile`` fuses each run of pointwise
  operations into one Triton kernel and leaves GEMMs and attention as library calls (Ansel et al., PyTorch 2,
  ASPLOS 2024, Sec. 4.3), so a compiled block launches two kernels per GEMM or attention call. Ulysses adds four
  all-to-alls per layer (Q, K, V, output), each with a layout copy before and after (xDiT's yunchang
  ``all_to_all_4D``). Ring attention (yunchang
  ``ring_flash_attn_forward`` and ``update_out_and_lse``, feifeibear/long-context-attention, yunchang/ring/): ``r``
  partial attentions, ``r - 1`` batched send/receive launches, a cast of the output to fp32 and back, and after
  each partial but the first a merge of nine pointwise kernels on the fp32 output (eager; compiled: one fused
  kernel), which in eager also read and write that fp32 output about ten times (``RING_MERGE_BYTES``). Tensor
  parallelism adds its two all-reduces per block, DistriFusion its all-gather per layer. A side cross-attention
  (ConsisID's face cross-attention after every second block) adds its own kernels (``SIDE_ATTENTION_*``). Outside
  the blocks an eager step launches the pipeline's loop and scheduler, the embeddings and the final layer, and
  modules that run once per forward on a few tokens (ConsisID's Local Facial Extractor): ``step_extra_kernels``,
  counted in the model file, host time only (their tensors are a latent or a few tokens).
  The host time is added to the device's: assumed, because the published tables show it: the eager-minus-compiled
  gap of xDiT's FLUX.1 table is about the same on 1, 2 and 4 H100s (2.41, 1.70, 2.61 s), which a host stream hidden
  under the device's work would not give.
- **Eager pointwise kernels on the device.** :mod:`plait.workloads.dit.cost` costs a block's GEMMs and attention, as
  a compiled run spends its time (its fused pointwise kernels left out). Eager PyTorch runs every other kernel of the
  block on its own, each reading and writing one activation of the block's width over this GPU's tokens at the memory
  bandwidth (the roofline of a streaming kernel: Williams et al., CACM 2009): ``eager_kernels - 2 (GEMMs + 1)``
  more kernels than a compiled block, whose fused kernels number one per GEMM or attention call. In an mmdit
  double-stream block half of them act on the image stream and half on the text's. Kernels that move more than
  that (an fp32 rotary embedding, the MLP's activation on its inner width) add their extra bytes
  (:mod:`plait.workloads.dit.eager_traffic`).
- **Pixels to PIL images.** diffusers' pipelines hand back PIL images by default (``output_type="pil"``): the decoded
  image (each video frame) is copied to the host in the VAE's dtype and converted there on one CPU thread
  (``VaeImageProcessor.postprocess``: :mod:`plait.hardware.host_postprocess`), once per output, inside the timed call:
  a part no number of GPUs shortens. A job whose pipeline returns the tensor (``output = "tensor"``) skips it.
- **Step caching** (first-block cache: ParaAttention, README 'First Block Cache'; TeaCache: Liu et al., arXiv
  2411.19108, Sec. 3): each step runs the first block, compares its output residual with the previous step's, and on
  a hit reuses the cached residual of the remaining blocks; the kernels outside the blocks run on every step.
  ``cache_skip`` is the fraction of steps that hit, which depends on the prompt and the threshold: the user states
  it. Quality: the output is no longer the uncached model's; TeaCache and ParaAttention report the trade
  (VBench/LPIPS and visual comparisons) per threshold, and a threshold that skips more steps changes the image more.
"""

from __future__ import annotations

from dataclasses import dataclass

from plait.cost.compute import memory_bytes_per_s
from plait.cost.host import issue_s
from plait.hardware.cluster import Cluster
from plait.hardware.host_postprocess import POSTPROCESS_NS_PER_VALUE
from plait.workloads.dit.components import text_encoder, text_encoder_s, vae_decoder
from plait.workloads.dit.cost import DitEstimate, DitPlan
from plait.workloads.dit.eager_traffic import extra_step_bytes
from plait.workloads.dit.model import ACT_BYTES, JOINED, DitJob, DitSpec
from plait.workloads.dit.vae_tiling import tiled_vae_decode_s

GEMMS_PER_BLOCK = {"dit": 7, "pixart": 10, "mmdit": 14, "joint": 8, "linear": 11}
"""GEMM (library) calls of one block in diffusers' forward code: Q, K and V projections, the attention's output and the
MLP's two, plus: dit its modulation; pixart its cross-attention's Q, K, V and output; mmdit (double-stream) those six
on each stream (Q, K, V, output and the MLP's two) and two modulations; joint (CogVideoX) two modulations; linear
(Sana) the cross-attention's four and the Mix-FFN's three convolutions in place of an MLP."""
GEMMS_PER_SINGLE = 6
"""An mmdit single-stream block (diffusers FluxSingleTransformerBlock): its modulation, proj_mlp, to_q, to_k, to_v and
proj_out."""

SIDE_ATTENTION_EAGER_KERNELS = 15
"""Kernels of one side cross-attention in eager PyTorch, counted from diffusers' ``PerceiverCrossAttention.forward``
and the ConsisID block loop (huggingface/diffusers@58eb52c0, models/transformers/consisid_transformer_3d.py; views
not counted): two LayerNorms, Q and K-V projections, two scalings, a matmul, a cast up, a softmax, a cast down, a
matmul, the head-merging copy, the output projection, the scaling by ``local_face_scale`` and the residual add."""
SIDE_ATTENTION_GEMMS = 5
"""Its GEMM calls (Q, K-V, two matmuls, output), each two kernels when compiled; the other
``SIDE_ATTENTION_EAGER_KERNELS - 2 x 5`` act on the image tokens' activations (costed at the hidden width)."""

RING_MERGE_BYTES = 38
"""Bytes per output element one eager merge of two partial attentions moves (yunchang ``_update_out_and_lse``): the
new partial read in bf16 and written in fp32 (6), ``out - block_out`` (12), the product with the sigmoid of the
log-sum-exp difference (8) and ``out - ...`` (12); the log-sum-exp arithmetic is per row, not per element."""


@dataclass(frozen=True, kw_only=True)
class EndToEnd:
    """A generation from prompt to pixels (module docstring)."""

    text_encode_s: float
    """All text encoders, once, on one GPU."""
    host_step_s: float
    """The host's kernel launches in one step, added to the device's step."""
    pointwise_step_s: float
    """Eager only: the device's unfused pointwise kernels in one step, which a compiled run fuses away."""
    denoise_s: float
    """All steps: the device's (the estimate's latency) and the host's, less the cached steps' skipped blocks."""
    vae_decode_s: float
    """The VAE decoder, once per output, on one GPU (in tiles where the job says so:
    :mod:`plait.workloads.dit.vae_tiling`)."""
    postprocess_s: float = 0.0
    """The decoded pixels copied to the host and converted to PIL images (:func:`postprocess_s`)."""

    @property
    def total_s(self) -> float:
        return self.text_encode_s + self.denoise_s + self.vae_decode_s + self.postprocess_s


def step_kernels(spec: DitSpec, job: DitJob, plan: DitPlan) -> float:
    """Kernels one GPU launches per denoising step (module docstring)."""
    pieces = plan.patches if plan.pipefusion > 1 else 1
    if job.compiled:
        blocks = spec.layers * 2 * (GEMMS_PER_BLOCK[spec.kind] + 1)
        blocks += spec.single_layers * 2 * (GEMMS_PER_SINGLE + 1)
        blocks += spec.side_attention_calls * 2 * SIDE_ATTENTION_GEMMS
    else:
        blocks = spec.layers * spec.eager_kernels + spec.single_layers * spec.eager_kernels_single
        blocks += spec.side_attention_calls * SIDE_ATTENTION_EAGER_KERNELS
    layers = spec.attention_layers / plan.pipefusion
    comm = 0.0
    if plan.ulysses > 1:
        comm += 4 * (1 if job.compiled else 3)
    if plan.ring > 1:
        comm += plan.ring + (plan.ring - 1) * (2 if job.compiled else 10) + 2
    if plan.tp > 1:  # Megatron's two all-reduces per block
        comm += 2
    if plan.distrifusion > 1:  # one asynchronous all-gather of K and V per layer
        comm += 1
    extra = 0 if job.compiled else spec.step_extra_kernels  # once a step, on every GPU (module docstring)
    return pieces * (blocks / plan.pipefusion + layers * comm) + extra


def end_to_end(spec: DitSpec, job: DitJob, plan: DitPlan, cluster: Cluster, estimate: DitEstimate) -> EndToEnd:
    """The generation of ``job`` under ``plan``, given its denoising ``estimate`` (module docstring)."""
    acc = cluster.accelerator
    prompts = job.batch * (2 if job.cfg else 1)
    text = sum(text_encoder_s(enc, min(spec.text_tokens or enc.max_tokens, enc.max_tokens), prompts, acc)
               for enc in map(text_encoder, spec.text_encoders))
    host = step_kernels(spec, job, plan) * issue_s(acc, eager=not job.compiled)
    pointwise = 0.0 if job.compiled else pointwise_step_s(spec, job, plan, cluster)
    kept = 1.0 - job.cache_skip * (spec.attention_layers - 1) / spec.attention_layers
    outside = (0 if job.compiled else spec.step_extra_kernels) * issue_s(acc, eager=True)  # runs on cache hits too
    denoise = kept * (estimate.latency_s + job.steps * (host - outside + pointwise)) + job.steps * outside
    vae = job.batch * tiled_vae_decode_s(vae_decoder(spec.vae), job.resolution, job.pixels_high, job.frames,
                                         spec.vae_downsample, job.vae_tile_px, job.vae_tile_stride_px, acc,
                                         job.vae_tile_frames, job.vae_tile_stride_frames, spec.vae_temporal) \
        if spec.vae else 0.0
    return EndToEnd(text_encode_s=text, host_step_s=host, pointwise_step_s=pointwise, denoise_s=denoise,
                    vae_decode_s=vae, postprocess_s=postprocess_s(spec, job, cluster))


RGB_CHANNELS = 3
"""Values per output pixel: the VAEs decode to RGB (``out_channels = 3``, the default of diffusers' ``AutoencoderKL``,
``AutoencoderDC`` and the video autoencoders, which the checkpoints here keep)."""


def postprocess_s(spec: DitSpec, job: DitJob, cluster: Cluster) -> float:
    """The host's part of handing back PIL images (module docstring): the decoded output's ``3 x width x height x
    frames x batch`` values copied over the host link in the VAE's dtype (``ACT_BYTES``), then converted on the host
    at :data:`plait.hardware.host_postprocess.POSTPROCESS_NS_PER_VALUE` each. 0 for ``output = "tensor"`` or a
    model without a VAE."""
    if job.output != "pil" or not spec.vae:
        return 0.0
    values = RGB_CHANNELS * job.resolution * job.pixels_high * job.frames * job.batch
    copy_s = values * ACT_BYTES / (cluster.accelerator.pcie_bandwidth_gb_per_s * 1e9)
    return copy_s + values * POSTPROCESS_NS_PER_VALUE.value * 1e-9


def pointwise_step_s(spec: DitSpec, job: DitJob, plan: DitPlan, cluster: Cluster) -> float:
    """The device time of one step's eager pointwise kernels beyond a compiled block's (module docstring)."""
    image = job.image_tokens(spec)
    seq = image + (spec.text_tokens if spec.kind in JOINED else 0)
    blocks = max(0, spec.eager_kernels - 2 * (GEMMS_PER_BLOCK[spec.kind] + 1))
    if spec.kind == "mmdit":  # a double-stream block: half its kernels on each stream's own tokens
        tokens_kernels = spec.layers * blocks / 2 * (image + spec.text_tokens)
    else:
        tokens_kernels = spec.layers * blocks * seq
    tokens_kernels += spec.single_layers * max(0, spec.eager_kernels_single - 2 * (GEMMS_PER_SINGLE + 1)) * seq
    tokens_kernels += spec.side_attention_calls * (SIDE_ATTENTION_EAGER_KERNELS - 2 * SIDE_ATTENTION_GEMMS) * image
    share = plan.ulysses * plan.ring * plan.distrifusion * plan.pipefusion  # tokens split; layers split by stage
    moved = 2 * tokens_kernels / share * spec.hidden * ACT_BYTES * job.passes / plan.cfg  # read and write
    moved += extra_step_bytes(spec, job, plan)  # fp32 rotary and the MLP's wide activation
    if plan.ring > 1:  # the merges of the partial attentions' fp32 outputs
        elements = seq / (plan.ulysses * plan.ring) * spec.hidden / plan.tp * job.passes / plan.cfg
        moved += spec.attention_layers / plan.pipefusion * (plan.ring - 1) * RING_MERGE_BYTES * elements
    return moved / memory_bytes_per_s(cluster.accelerator)
