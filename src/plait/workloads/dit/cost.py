"""Latency, throughput and memory per GPU of parallel diffusion-transformer inference (
:mod:`plait.workloads.dit.model`). One denoising step of ``P`` model passes (images x 2 with classifier-free guidance) of
``S`` image tokens (and ``T`` text tokens) on ``N = cfg x pipefusion x ulysses x ring x tp`` GPUs, or on ``N``
DistriFusion patches:

- **cfg** (2): the conditional and unconditional passes on different GPUs (xDiT's CFG parallel: Fang et al.,
  arXiv 2411.01738, Sec. 4.1); one all-gather of the predicted noise per step.
- **ulysses** (``u``): the sequence split over ``u`` GPUs; before attention an all-to-all of Q, K, V turns it into a
  split of the heads, after it one of the output turns it back (DeepSpeed-Ulysses: Jacobs et al., arXiv 2309.14509,
  Sec. 3.1: ``4 S H / u`` elements sent per GPU and layer). ``u`` must divide the heads.
- **ring** (``r``): each GPU keeps ``S / r`` queries and passes its K, V block around the ring, ``r - 1`` sends per
  layer overlapped with the blockwise attention (Ring Attention: Liu et al., arXiv 2310.01889, Sec. 3); with Ulysses
  the two nest (USP: Fang & Zhao, arXiv 2405.07719, Sec. 3: Ulysses inside, ring across). Inside PipeFusion each
  patch rings the whole K, V buffer (xDiT's ``xdit_ring_flash_attn_forward`` rings its cache): ``M`` passes a step.
- **tp** (``t``): Megatron's split of every block (Shoeybi et al., arXiv 1909.08053, Sec. 3): two all-reduces of the
  block's ``S H`` activations per block, and one all-gather of the column-split adaLN modulation (``6 H`` a pass).
- **pipefusion** (``p``, ``M`` patches): the layers in ``p`` stages, the image in ``M`` patches streamed through
  them; each stage attends with the fresh K, V of its patch and one-step-stale K, V of the others, so a step needs no
  bubble once the pipeline is full (PipeFusion: Wang et al., arXiv 2405.14430, Sec. 4): per patch and boundary one
  point-to-point send of ``S H / M``, overlapped with the next patch's compute; the pipeline fills once
  (``(p - 1) / M`` of a step) and keeps a K, V buffer of the whole sequence for its layers. The first stage denoises
  a patch's next step only once its updated latent has come round all ``p`` stages: with ``M`` patches of ``c``
  seconds and sends of ``x``, each step waits ``max(0, p x - (M - p) c)`` (found by the patch-level simulation,
  :mod:`plait.workloads.dit.simulate`).
- **offload**: the weights in host memory, streamed in layer by layer (ChunkFlow, 001-02:
  :mod:`plait.workloads.dit.offload`).
- **distrifusion** (``n``): the image in ``n`` patches, one per GPU, attending with stale K, V of the others; every
  layer all-gathers its fresh K, V asynchronously, overlapped with the step's compute (DistriFusion: Li et al.,
  CVPR 2024, Sec. 4.2); the first ``warmup`` steps run synchronously (the paper's warm-up, Sec. 4.3).

Compute: each block's GEMMs (QKV, output, MLP; per stream for MMDiT) at the device's GEMM curve, attention at its
FlashAttention curve over the keys each query attends to (the curve is FlashAttention-2's forward and backward
together; the forward alone runs at least as fast: Dao, arXiv 2307.08691, Fig. 5-6, so this errs slow). This is the
device's denoising loop; the text encoders, the VAE decoder and the host's launches are added by
:mod:`plait.workloads.dit.pipeline` (the scheduler's arithmetic is left out: a few elementwise kernels per step).

Memory: weights (``/ (p t)``), stale K, V buffers (pipefusion: its layers; distrifusion: every layer), and one
block's transient activations, ``(4 + r)`` tensors of ``tokens x H`` per pass on the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from plait.cost.compute import attention_flops_per_s, gemm_time_s, memory_bytes_per_s
from plait.cost.flops import Gemm
from plait.cost.links import collective_s
from plait.errors import ConfigError
from plait.hardware.accelerator import Accelerator
from plait.hardware.cluster import Cluster
from plait.workloads.dit.model import ACT_BYTES, JOINED, DitJob, DitSpec
from plait.workloads.dit.offload import offloaded_step_s, streamed_bytes_per_step
from plait.workloads.dit.sent_bytes import (
    cfg_sent_bytes,
    pipefusion_sent_bytes,
    ring_sent_bytes,
    stale_kv_sent_bytes,
    ulysses_sent_bytes,
)

DISTRIFUSION_WARMUP = 4
"""Synchronous steps before DistriFusion switches to stale activations (its default: Li et al., CVPR 2024, Sec. 5.1:
'we use 4 warmup steps')."""


@dataclass(frozen=True, kw_only=True)
class DitPlan:
    """Degrees of each parallelism; their product is the GPU count."""

    cfg: int = 1
    pipefusion: int = 1
    patches: int = 1
    """PipeFusion's patches per image (``>= pipefusion``)."""
    ulysses: int = 1
    ring: int = 1
    tp: int = 1
    distrifusion: int = 1
    offload: int = 0
    """1: weights in host memory, streamed in layer by layer (:mod:`plait.workloads.dit.offload`)."""

    @property
    def gpus(self) -> int:
        return self.cfg * self.pipefusion * self.ulysses * self.ring * self.tp * self.distrifusion

    @property
    def stale(self) -> bool:
        """Uses activations of the previous step (an approximation of the model's output)."""
        return self.pipefusion > 1 or self.distrifusion > 1

    def label(self) -> str:
        parts = [f"{name}={value}" for name, value in (("cfg", self.cfg), ("pipefusion", self.pipefusion),
                 ("ulysses", self.ulysses), ("ring", self.ring), ("tp", self.tp),
                 ("distrifusion", self.distrifusion)) if value > 1]
        if self.pipefusion > 1:
            parts.append(f"patches={self.patches}")
        if self.offload:
            parts.append("offload=1")
        return ",".join(parts) or "single GPU"


@dataclass(frozen=True, kw_only=True)
class DitEstimate:
    """One step per GPU and the whole generation."""

    compute_s: float
    comm_s: float
    """Communication left exposed after overlap."""
    step_s: float
    synchronous_s: float
    """A step that waits for all of its communication (DistriFusion's warm-up)."""
    patch_transfer_s: float
    """PipeFusion: one patch's activation sent to the next stage (0 for other plans)."""
    latency_s: float
    """All denoising steps of one batch (warm-up and pipeline fill included)."""
    memory_bytes: float
    weight_bytes: float
    buffer_bytes: float


def check_plan(spec: DitSpec, job: DitJob, plan: DitPlan) -> None:
    """Refuse a plan the model or job cannot take (one line naming the value and the rule)."""
    if min(plan.cfg, plan.pipefusion, plan.ulysses, plan.ring, plan.tp, plan.distrifusion, plan.patches) < 1:
        raise ConfigError(f"every degree of {plan.label()} must be >= 1")
    if plan.offload not in (0, 1) or (plan.offload and plan.stale):
        raise ConfigError(f"offload={plan.offload} must be 0 or 1, and without stale activations (PipeFusion, "
                          "DistriFusion)")
    if plan.cfg not in (1, 2) or (plan.cfg == 2 and not job.cfg):
        raise ConfigError(f"cfg={plan.cfg} must be 1, or 2 with classifier-free guidance on")
    if spec.heads % (plan.ulysses * plan.tp):
        raise ConfigError(f"ulysses x tp = {plan.ulysses * plan.tp} must divide heads={spec.heads}")
    if plan.distrifusion > 1 and plan.gpus != plan.cfg * plan.distrifusion:
        raise ConfigError("distrifusion combines with cfg only (it is its own patch parallelism)")
    tokens = job.image_tokens(spec)
    if plan.pipefusion > 1 and (plan.patches < plan.pipefusion or tokens % plan.patches):
        raise ConfigError(f"patches={plan.patches} must be >= pipefusion={plan.pipefusion} and divide the "
                          f"{tokens} image tokens")
    if spec.attention_layers % plan.pipefusion:
        raise ConfigError(f"pipefusion={plan.pipefusion} must divide the {spec.attention_layers} layers")
    split = plan.ulysses * plan.ring * plan.distrifusion * (plan.patches if plan.pipefusion > 1 else 1)
    if tokens % split:
        raise ConfigError(f"the {tokens} image tokens must split evenly into {split} pieces")


def estimate_dit(spec: DitSpec, job: DitJob, plan: DitPlan, cluster: Cluster) -> DitEstimate:
    """One step and the whole job of ``plan`` on ``cluster`` (module docstring)."""
    check_plan(spec, job, plan)
    b, g = ACT_BYTES, _gpu_share(spec, job, plan)
    attention = _attention_s(spec, plan, cluster.accelerator, g)
    compute = _compute_s(spec, plan, cluster.accelerator, g, attention)
    comm = _exposed_comm_s(spec, job, plan, cluster, g, attention)
    overlap_comm, patch_transfer = _overlapped_comm_s(spec, plan, cluster, g)
    step = compute + comm + max(0.0, overlap_comm - compute)
    if plan.pipefusion > 1:  # a patch's updated latent must come back round the p stages before its next step
        step += max(0.0, plan.pipefusion * patch_transfer - (plan.patches - plan.pipefusion) * compute / plan.patches)
    synchronous = compute + comm + overlap_comm
    weights = resident = streamed_bytes_per_step(spec.params(), b, plan.pipefusion * plan.tp)
    if plan.offload:
        step = offloaded_step_s(compute, step - compute, weights, cluster)
        resident = 2 * weights / g.layers  # the layer computing and the one arriving
    warm = min(job.steps, DISTRIFUSION_WARMUP) if plan.distrifusion > 1 else 0
    fill = (plan.pipefusion - 1) / plan.patches * compute if plan.pipefusion > 1 else 0.0
    latency = warm * synchronous + (job.steps - warm) * step + fill
    buffers = 0.0
    if plan.stale:
        buffers = 2 * g.seq * spec.hidden * b * g.passes * g.layers  # stale K and V of the whole sequence
    transient = (4 + spec.mlp_ratio) * g.tokens * spec.hidden * b * g.passes
    return DitEstimate(compute_s=compute, comm_s=step - compute, step_s=step, synchronous_s=synchronous,
                       patch_transfer_s=patch_transfer, latency_s=latency,
                       memory_bytes=resident + buffers + transient, weight_bytes=resident, buffer_bytes=buffers)


@dataclass(frozen=True)
class _GpuShare:
    """What one GPU runs of each denoising step under a plan."""

    passes: float  # model passes per step (classifier-free guidance's two split over cfg)
    image: int  # image (video) tokens of the whole latent
    seq: int  # the sequence attention runs over (the text's tokens too where the model joins them)
    share: int  # ways the sequence is split (Ulysses x ring x DistriFusion)
    tokens: float  # this GPU's tokens of each pass, every stage's patches together
    layers: float  # attention layers of this GPU's PipeFusion stage
    pieces: int  # times each block runs per step (PipeFusion runs it once per patch)


def _gpu_share(spec: DitSpec, job: DitJob, plan: DitPlan) -> _GpuShare:
    """The passes, tokens and layers one GPU runs under ``plan``."""
    image = job.image_tokens(spec)
    seq = image + (spec.text_tokens if spec.kind in JOINED else 0)
    share = plan.ulysses * plan.ring * plan.distrifusion
    return _GpuShare(passes=job.passes / plan.cfg, image=image, seq=seq, share=share, tokens=seq / share,
                     layers=spec.attention_layers / plan.pipefusion,
                     pieces=plan.patches if plan.pipefusion > 1 else 1)


def _attention_s(spec: DitSpec, plan: DitPlan, acc: Accelerator, g: _GpuShare) -> float:
    """The step's attention: self-attention over the sequence (linear for Sana) and cross-attention to the text."""
    layers, passes, tokens = g.layers, g.passes, g.tokens
    keys = g.seq
    if spec.kind == "linear":
        attention = layers * passes * _linear_attention_s(spec, tokens, plan.tp, acc)
        attn_flops = 4.0 * tokens * spec.text_tokens * spec.hidden / plan.tp  # cross-attention to the text
        attention += layers * passes * attn_flops / attention_flops_per_s(acc, spec.text_tokens)
    else:
        attn_flops = 4.0 * tokens * keys * spec.hidden / plan.tp
        if spec.kind == "pixart":
            attn_flops += 4.0 * tokens * spec.text_tokens * spec.hidden / plan.tp
        attention = layers * passes * attn_flops / attention_flops_per_s(acc, keys)
    return attention


def _compute_s(spec: DitSpec, plan: DitPlan, acc: Accelerator, g: _GpuShare, attention: float) -> float:
    """The step's compute: the blocks' GEMMs, ``attention`` and any side attention on the image tokens."""
    compute = g.layers * g.passes * g.pieces * _block_s(spec, g.tokens / g.pieces, plan.tp, acc)
    compute += attention
    if spec.side_attention_calls:  # on this GPU's image (video) tokens only; its keys are a few conditioning tokens
        calls = spec.side_attention_calls / plan.pipefusion
        compute += calls * g.passes * g.pieces * _side_attention_s(spec, g.image / g.share / g.pieces, plan.tp, acc)
    return compute


def _exposed_comm_s(spec: DitSpec, job: DitJob, plan: DitPlan, cluster: Cluster, g: _GpuShare,
                    attention: float) -> float:
    """The step's communication left exposed: Ulysses, ring (past ``attention``), TP and CFG collectives."""
    b, layers, passes, tokens = ACT_BYTES, g.layers, g.passes, g.tokens
    comm = 0.0
    hidden_part = spec.hidden / plan.tp
    if plan.ulysses > 1:  # all_to_all_s takes the bytes spread over the group, its own share included
        sent = ulysses_sent_bytes(tokens, hidden_part, b, passes, plan.ulysses)
        comm += layers * float(collective_s(cluster, "all_to_all", plan.ulysses, 1,
                                            sent * plan.ulysses / (plan.ulysses - 1)))
    if plan.ring > 1:
        block = ring_sent_bytes(tokens, hidden_part, b, passes, plan.ring) / (plan.ring - 1)
        ring = g.pieces * (plan.ring - 1) * float(collective_s(cluster, "p2p", plan.ring, plan.ulysses, block))
        comm += layers * max(0.0, ring - attention / layers)
    if plan.tp > 1:  # all_reduce_s takes the reduced tensor and sends 2 (t - 1) / t of it: tp_sent_bytes
        comm += layers * 2 * float(collective_s(cluster, "all_reduce", plan.tp, 1, tokens * spec.hidden * b * passes))
        comm += layers * float(collective_s(cluster, "all_gather", plan.tp, 1, 6 * spec.hidden * b * passes))
        if spec.side_attention_calls:  # its row-split output projection all-reduces the image tokens' output
            side_out = g.image / g.share * spec.hidden * b * passes
            comm += spec.side_attention_calls / plan.pipefusion * float(
                collective_s(cluster, "all_reduce", plan.tp, 1, side_out))
    if plan.cfg > 1:  # the gathered whole: each pass's velocity of the tokens this GPU predicts
        predicted_tokens = g.image / (plan.ulysses * plan.ring * plan.distrifusion)
        latent = cfg_sent_bytes(predicted_tokens, spec.patch**2 * spec.latent_channels, b, job.batch, plan.cfg)
        comm += float(collective_s(cluster, "all_gather", plan.cfg, plan.gpus // plan.cfg,
                                   latent * plan.cfg / (plan.cfg - 1)))
    return comm


def _overlapped_comm_s(spec: DitSpec, plan: DitPlan, cluster: Cluster, g: _GpuShare) -> tuple[float, float]:
    """The communication compute may hide (PipeFusion's patches, DistriFusion's stale K/V) and one patch's send."""
    b = ACT_BYTES
    overlap_comm = patch_transfer = 0.0
    if plan.pipefusion > 1:
        per_patch = pipefusion_sent_bytes(g.tokens, spec.hidden, b, g.passes) / plan.patches
        patch_transfer = float(collective_s(cluster, "p2p", plan.pipefusion, g.share, per_patch))
        overlap_comm += plan.patches * patch_transfer
    if plan.distrifusion > 1:  # all_gather_s takes the gathered whole: every GPU's share
        sent = stale_kv_sent_bytes(g.tokens, spec.hidden, b, g.passes, plan.distrifusion)
        whole = sent * plan.distrifusion / (plan.distrifusion - 1)
        overlap_comm += g.layers * float(collective_s(cluster, "all_gather", plan.distrifusion, 1, whole))
    return overlap_comm, patch_transfer


def _block_s(spec: DitSpec, tokens: float, tp: int, acc) -> float:  # type: ignore[no-untyped-def]
    """One pass's GEMMs of one block on ``tokens`` (``tp`` splits each weight); smaller pieces run at the GEMM
    curve's lower efficiency."""
    h, m = spec.hidden, max(1, round(tokens))
    mlp = round(spec.mlp_ratio * h)
    up = (spec.mlp_factor - 1) * mlp  # a gated MLP's input projection is doubled
    gemms = [Gemm(m, 3 * h // tp, h), Gemm(m, h, h // tp), Gemm(m, up // tp, h), Gemm(m, h, mlp // tp)]
    if spec.kind in ("pixart", "linear"):
        gemms += [Gemm(m, h // tp, h), Gemm(m, h, h // tp)]  # cross-attention's Q and output on the image tokens
        gemms.append(Gemm(spec.text_tokens, 2 * h // tp, h))  # its K and V on the text tokens
    depthwise = 0.0
    if spec.mlp == "glumbconv":  # Mix-FFN's 3x3 depthwise convolution reads and writes its 2 r H wide input
        depthwise = 2 * m * up / tp * ACT_BYTES / memory_bytes_per_s(acc)
    return sum(gemm_time_s(g, acc, "bf16") for g in gemms) + depthwise


def _side_attention_s(spec: DitSpec, tokens: float, tp: int, acc) -> float:  # type: ignore[no-untyped-def]
    """One pass of one side cross-attention (:attr:`DitSpec.side_attention_every`) on ``tokens`` image tokens: its Q
    and output projections, ``H -> w`` and ``w -> H`` (diffusers ``PerceiverCrossAttention.to_q``, ``to_out``);
    ``tp`` splits ``w`` as Megatron splits attention heads (its output's all-reduce is in the step's TP
    communication). Its K, V projection and its attention over the 32
    conditioning tokens (ConsisID's ``LFE_num_querie``) are left out: under 1% of these two GEMMs."""
    m, w = max(1, round(tokens)), spec.side_attention_width // tp
    return gemm_time_s(Gemm(m, w, spec.hidden), acc, "bf16") + gemm_time_s(Gemm(m, spec.hidden, w), acc, "bf16")


def _linear_attention_s(spec: DitSpec, tokens: float, tp: int, acc) -> float:  # type: ignore[no-untyped-def]
    """One pass of ReLU linear attention on ``tokens`` queries (Katharopoulos et al., ICML 2020, Eq. 5-6; Sana,
    Xie et al., arXiv 2410.10629, Sec. 2.2): per head ``K^T V`` and ``Q (K^T V)``, ``4 tokens d`` FLOPs per head of
    width ``d``, ``4 tokens H`` in all, on head-sized (``d x d``) products that stream their operands: costed at the
    memory bandwidth, Q, K and V read in bf16, cast to fp32 and read again, the output written in fp32 and cast
    back (diffusers' SanaLinearAttnProcessor2_0 computes in float32): ten tensor passes of ``tokens x H``."""
    elements = tokens * spec.hidden / tp
    flops_s = 4.0 * elements * (spec.hidden // spec.heads) / acc.peak_flops("fp32")
    bytes_s = elements * (3 * ACT_BYTES + 3 * 4 + 3 * 4 + 4 + 4 + ACT_BYTES) / memory_bytes_per_s(acc)
    return max(flops_s, bytes_s)
